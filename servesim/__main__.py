"""`python -m servesim ...`: the same as the `servesim` command."""
from servesim.cli import command

command()
