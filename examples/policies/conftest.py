"""These examples are a user's folder outside dtnet: put it on the path, as PYTHONPATH would."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
