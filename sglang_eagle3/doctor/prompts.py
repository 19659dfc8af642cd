"""The data-free doctor's built-in prompts: chat, code, prose and maths (pure).

A drafter is served on all of these, and its accept length differs by kind; a set of only one
kind would score the layouts on a narrow slice of what the server will see.
"""

from __future__ import annotations

BUILT_IN: tuple[str, ...] = (
    # chat
    "user: Can you recommend a good book about the history of science?\nassistant:",
    "user: How do I politely decline a meeting invitation?\nassistant:",
    "user: What is the difference between a virus and a bacterium?\nassistant:",
    "user: Plan a three-day trip to Lisbon on a budget.\nassistant:",
    # code
    "def fibonacci(n):\n    ",
    "import os\nimport sys\n\n\ndef main():\n    args = ",
    "class Stack:\n    def __init__(self):\n        ",
    "with open(path) as f:\n    for line in f:\n        ",
    "try:\n    import json\nexcept ImportError:\n    ",
    "def parse_args(argv=None):\n    parser = argparse.ArgumentParser(",
    # prose
    "The lighthouse keeper climbed the stairs for the last time, knowing that",
    "In the spring of 1848, revolutions swept across Europe, beginning in",
    "A good explanation starts with what the reader already knows, then",
    "The river had frozen overnight, and by morning the village children",
    # maths
    "Problem: a train travels 120 km in 1.5 hours. What is its average speed?\nSolution:",
    "Prove that the sum of two even integers is even.\nProof: Let a = 2m and b = 2n",
    "Solve for x: 3x + 7 = 22.\nStep 1:",
    "The derivative of f(x) = x^3 - 4x + 1 is",
)
