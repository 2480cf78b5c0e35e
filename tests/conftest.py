import os
import sys

# Tests import the packages from the source tree even when lowbit is not installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
