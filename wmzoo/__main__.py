"""``python -m wmzoo``: the ``wmzoo`` command (what ``wmzoo study`` runs each cell with)."""

from wmzoo.cli import main

raise SystemExit(main())
