"""`python -m lab.engine.training`: train the bundled tokenizer and models (see cli.py)."""

from lab.engine.training.cli import main

if __name__ == "__main__":
    main()
