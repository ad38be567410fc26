import sys

from emulator.agent.replay import main

sys.exit(main())
