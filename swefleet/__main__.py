"""`python -m swefleet ...`: the same command line as the `swefleet` script."""

from swefleet.app.cli import main

raise SystemExit(main())
