"""`python -m learner.plot RUN_DIR [RUN_DIR ...]`: learning curves and training statistics (see
learner/report/plot.py)."""
import sys

from learner.report.plot import main

if __name__ == "__main__":
    sys.exit(main())
