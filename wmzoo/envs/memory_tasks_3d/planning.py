"""Path finding on the grid of a rooms layout (one cell = one character of the layout text)."""

from __future__ import annotations

import heapq
import math

Cell = tuple[int, int]  # (row, column) of the layout text


def shortest_path(free: frozenset[Cell] | set[Cell], start: Cell, goal: Cell) -> list[Cell]:
    """Cells from ``start`` to ``goal`` (both included) over ``free``: 8-connected, diagonal
    steps cost sqrt(2) and may not cut a blocked corner. Empty when ``goal`` is unreachable."""
    dist = {start: 0.0}
    prev: dict[Cell, Cell] = {}
    heap = [(0.0, start)]
    while heap:
        d, cell = heapq.heappop(heap)
        if cell == goal:
            path = [goal]
            while path[-1] != start:
                path.append(prev[path[-1]])
            return path[::-1]
        if d > dist[cell]:
            continue
        r, c = cell
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                nxt = (r + dr, c + dc)
                if nxt == cell or nxt not in free:
                    continue
                if dr and dc and ((r + dr, c) not in free or (r, c + dc) not in free):
                    continue
                nd = d + (math.sqrt(2.0) if dr and dc else 1.0)
                if nd < dist.get(nxt, math.inf):
                    dist[nxt], prev[nxt] = nd, cell
                    heapq.heappush(heap, (nd, nxt))
    return []


def connected(cells: set[Cell]) -> bool:
    """Whether ``cells`` form one 4-connected region."""
    todo, seen = [next(iter(cells))], set()
    while todo:
        r, c = todo.pop()
        if (r, c) in seen or (r, c) not in cells:
            continue
        seen.add((r, c))
        todo += [(r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)]
    return seen == cells


def corners(path: list[Cell]) -> list[Cell]:
    """The cells of ``path`` after its start where its direction changes, and its end."""
    out = []
    for i in range(1, len(path)):
        step = (path[i][0] - path[i - 1][0], path[i][1] - path[i - 1][1])
        if i + 1 == len(path) or (path[i + 1][0] - path[i][0], path[i + 1][1] - path[i][1]) != step:
            out.append(path[i])
    return out
