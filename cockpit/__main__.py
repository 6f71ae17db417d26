import sys

from cockpit.cli import entry

sys.exit(entry())
