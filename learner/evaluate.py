"""`python -m learner.evaluate RUN_DIR_OR_CHECKPOINT`: play whole games with a trained policy (see
learner/evaluation/evaluate.py)."""
import sys

from learner.evaluation.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
