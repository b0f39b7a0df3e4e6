"""``python -m roar``: the command line, as the ``roar`` script runs it."""

from roar.cli import app

app(prog_name="roar")
