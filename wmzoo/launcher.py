"""What ``wmzoo run --nproc N`` shows of torchrun's output: wmzoo's own lines, not its tracebacks.

torchrun (``torch.distributed.run``) passes every rank's output through, and when a rank stops it
prints the surviving ranks' tracebacks (``[rank0]: Traceback ...``, e.g. gloo's "Connection reset
by peer"), its own elastic-agent log lines (``E1128 02:00:58 ... failed (exitcode: -9)``) and a
``ChildFailedError`` traceback with a summary naming the rank that failed first. :class:`RankOutput`
reads that stream, forwards everything else as it comes (progress bars included), keeps the
tracebacks from the user, and reads the summary's root cause, so the launcher can say in one
line which rank was lost and where the run's checkpoint is (:func:`lost_rank_line`).
"""

from __future__ import annotations

import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

_LINE_END = re.compile(rb"(?<=[\r\n])")
_RANK_TRACE = re.compile(rb"^\[rank\d+\]:")
_AGENT_LOG = re.compile(rb"^[WEIDF]\d{4} \d\d:\d\d:\d\d")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


@dataclass
class Failure:
    """The rank torchrun names as the root cause, and its exit code (negative: the signal)."""

    rank: int
    exitcode: int

    def describe(self) -> str:
        if self.exitcode < 0:
            try:
                return f"killed by {signal.Signals(-self.exitcode).name}"
            except ValueError:
                return f"killed by signal {-self.exitcode}"
        return f"exit code {self.exitcode}"


class RankOutput:
    """Forward ``source`` (torchrun's stderr) to ``sink`` in a thread, less torchrun's tracebacks
    and agent logs; :attr:`failure` is the root cause its summary names, :attr:`errors` the
    ``wmzoo: error:`` lines the ranks printed (held back, not forwarded: a rank that lost its peer
    reports the lost connection, the launcher the lost rank)."""

    def __init__(self, source: IO[bytes], sink: IO[bytes]) -> None:
        self.source, self.sink = source, sink
        self.failure: Failure | None = None
        self.errors: list[str] = []
        self._summary = False  # inside torchrun's closing traceback and summary: nothing is shown
        self._root = False
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def _pump(self) -> None:
        pending = b""
        while chunk := self.source.read1(65536):
            # a line ends at "\n", or at "\r" where a progress bar redraws itself in place
            *lines, pending = _LINE_END.split(pending + chunk)
            for line in lines:
                self._line(line)
        if pending:
            self._line(pending)

    def _line(self, line: bytes) -> None:
        text = line.decode(errors="replace")
        if self._summary:
            self._read_summary(text)
            return
        if line.startswith(b"Traceback (most recent call last):"):
            self._summary = True  # torchrun's own: everything after it is its report
            return
        if _RANK_TRACE.match(line) or _AGENT_LOG.match(line):
            return
        if text.startswith("wmzoo: error:"):  # held back: the launcher decides which to show
            self.errors.append(text.rstrip("\r\n"))
            return
        self._write(line)

    def _read_summary(self, text: str) -> None:
        if text.startswith("Root Cause"):
            self._root = True
        elif self._root and self.failure is None and (match := _ROOT_RANK.match(text)):
            self.failure = Failure(int(match.group(1)), 0)
        elif self._root and self.failure is not None and (match := _ROOT_EXIT.match(text)):
            self.failure.exitcode = int(match.group(1))
            self._root = False

    def _write(self, data: bytes) -> None:
        self.sink.write(data)
        self.sink.flush()


def lost_rank_line(failure: Failure | None, nproc: int, logdir: Path) -> str:
    """The one line for a data-parallel run that stopped because a rank did: which rank, how,
    and the checkpoint to resume from (or that none was written yet)."""
    checkpoint = logdir / "checkpoint.safetensors"
    who = f"rank {failure.rank} of {nproc} stopped ({failure.describe()})" if failure else f"a rank of {nproc} stopped"
    if checkpoint.is_file():
        where = (f"the last checkpoint is {checkpoint}: continue with "
                 f"`wmzoo run --logdir {logdir} --resume --nproc {nproc}`")
    else:
        where = f"no checkpoint was written yet in {logdir}: start the run again"
    return f"{who}, so the data-parallel run stopped; {where}"
