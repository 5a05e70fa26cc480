import sys

from moeproxy.cli import main

sys.exit(main())
