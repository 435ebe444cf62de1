import sys

from fleetwatch.cli.demo.receivers import main

sys.exit(main())
