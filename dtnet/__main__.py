import sys

from dtnet.cli import entry

sys.exit(entry())
