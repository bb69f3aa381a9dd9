import sys

from mysqlprobe.cli import main

sys.exit(main())
