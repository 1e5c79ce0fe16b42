"""``trio-agents demo``: a scripted run doing real work in a small project it makes for itself.

No key, no network: the scripted provider plays ``runtime/demo/demo.json``. A main agent looks at
the project, then splits a review over three parallel sub-agents — a scanner that greps the to-do
markers and starts a sub-agent of its own to triage the worst file, a tester that runs the unit
tests and a slow integration script (about ten seconds: the one to try Ctrl+C on), and a reader that
reads the README and the code — plus a linter in the background (``run_in_background``: main
goes on, and reads its report as a message, docs/collaboration.md), and ends with the answer, the
trace path and the command to inspect it. Ctrl+C then ``s`` and the tester's number stops the tester
gracefully: its integration check runs to its end, and main reads its partial work. Every tool
call is real (glob, grep, read, bash) and runs in a temporary folder filled with the project
below, removed at the end; the trace stays under ``.trio-agents/traces/``.

It runs in ``allow-all`` mode (its script only reads, and runs its own scripts, in its own
folder), so it works the same without a terminal.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from collections.abc import AsyncGenerator
from importlib import resources
from pathlib import Path
from typing import Any

from ._options import (
    RunOptions,
    UsageError,
    check_output_paths,
    existing_file,
    is_interactive,
    run_command,
    run_prompt,
    setup_logging,
    shows_live_view,
)

DEMO_PROMPT = (
    "Review the project in this workspace: find the open to-do markers and triage the worst file, "
    "run the tests, and say what the code does. Split the work over parallel sub-agents."
)

# A small, realistic project: a shopping-cart library with a few to-do markers (each naming
# its ticket, as house styles ask), unit tests, and an
# integration script that waits on a (pretend) service.
PROJECT: dict[str, str] = {
    "README.md": """\
# shop

A tiny shopping-cart library: products and prices, a cart with discounts, and a stock keeper.

    from shop.cart import Cart
    cart = Cart()
    cart.add("apple", quantity=3)
    print(cart.total())

Run the unit tests with `PYTHONPATH=src python3 -m unittest discover -s tests` and the
integration check with `sh scripts/integration.sh` (it talks to the warehouse service).
""",
    "pyproject.toml": """\
[project]
name = "shop"
version = "0.3.0"
requires-python = ">=3.9"
""",
    "src/shop/__init__.py": '''\
"""shop: products, a cart, and stock."""

__version__ = "0.3.0"
''',
    "src/shop/pricing.py": '''\
"""Prices in cents, and the discount rules."""

PRICES = {"apple": 50, "pear": 65, "bread": 240, "coffee": 899}


def price_of(product: str) -> int:
    """The unit price of *product*, in cents."""
    return PRICES[product]


def apply_discount(amount: int, percent: int) -> int:
    # TODO(#31): round half to even, like the accounting system does
    return amount - amount * percent // 100
''',
    "src/shop/cart.py": '''\
"""The cart: what a customer is about to buy."""

from shop.pricing import apply_discount, price_of


class Cart:
    def __init__(self) -> None:
        self.lines: dict[str, int] = {}
        self.discount = 0

    def add(self, product: str, quantity: int = 1) -> None:
        # TODO(#12): refuse quantity <= 0 (a negative quantity currently refunds money)
        self.lines[product] = self.lines.get(product, 0) + quantity

    def set_discount(self, percent: int) -> None:
        # TODO(#17): discounts do not stack; decide whether a second code replaces the first
        self.discount = percent

    def total(self) -> int:
        gross = sum(price_of(p) * q for p, q in self.lines.items())
        # TODO(#22): add VAT per product category
        return apply_discount(gross, self.discount)
''',
    "src/shop/stock.py": '''\
"""Stock levels, as the warehouse reports them."""

STOCK = {"apple": 120, "pear": 0, "bread": 14, "coffee": 7}


def reserve(product: str, quantity: int) -> bool:
    """Take *quantity* out of stock if there is enough."""
    # TODO(#9): two carts can reserve the last item at once (no lock)
    if STOCK.get(product, 0) < quantity:
        return False
    STOCK[product] -= quantity
    return True
''',
    "tests/test_cart.py": """\
import unittest

from shop.cart import Cart


class CartTest(unittest.TestCase):
    def test_total(self) -> None:
        cart = Cart()
        cart.add("apple", 2)
        cart.add("bread")
        self.assertEqual(cart.total(), 340)

    def test_discount(self) -> None:
        cart = Cart()
        cart.add("coffee")
        cart.set_discount(10)
        self.assertEqual(cart.total(), 810)


if __name__ == "__main__":
    unittest.main()
""",
    "tests/test_stock.py": """\
import unittest

from shop.stock import reserve


class StockTest(unittest.TestCase):
    def test_reserve(self) -> None:
        self.assertTrue(reserve("apple", 3))
        self.assertFalse(reserve("pear", 1))


if __name__ == "__main__":
    unittest.main()
""",
    "scripts/integration.sh": """\
#!/bin/sh
# Integration check: places an order against the warehouse service and waits for it.
echo "placing a test order with the warehouse service..."
sleep 10
echo "order 1042 confirmed: 3 x apple, 1 x bread"
echo "integration check passed"
""",
}


def write_project(folder: Path) -> None:
    """Fill *folder* with the demo project."""
    for rel, text in PROJECT.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (folder / "scripts" / "integration.sh").chmod(0o755)


def demo_scenario_text() -> str:
    """The demo's scenario file (package data), as text."""
    return resources.files("runtime").joinpath("demo/demo.json").read_text(encoding="utf-8")


def run_demo(opts: RunOptions) -> int:
    """``trio-agents demo``: make the project, run the scripted review, clean up.

    With ``--workspace DIR`` the project is written into DIR (empty or new) and kept; with
    ``--scenario FILE`` that scenario is played instead of the built-in one.

    Returns:
        The exit code (0 completed, 1 otherwise, 130 aborted, 2 bad options).
    """
    existing_file(opts.scenario, "--scenario")
    existing_file(opts.agents, "--agents")
    check_output_paths(opts)
    if opts.provider not in (None, "scripted"):
        raise UsageError(
            "the demo runs on the scripted provider; use 'trio-agents run' for "
            f"--provider {opts.provider}"
        )
    setup_logging(opts.debug, opts.verbose)
    keep = opts.workspace is not None
    if keep:
        folder = Path(opts.workspace or ".")
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
            raise UsageError(f"--workspace {folder}: the demo needs an empty or new folder")
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = Path(tempfile.mkdtemp(prefix="trio-agents-demo-"))
    scenario_dir = Path(tempfile.mkdtemp(prefix="trio-agents-demo-scenario-"))
    try:
        write_project(folder)
        scenario = opts.scenario
        if scenario is None:
            scenario = str(scenario_dir / "demo.json")
            Path(scenario).write_text(demo_scenario_text(), encoding="utf-8")
        demo_opts = dataclasses.replace(
            opts,
            provider="scripted",
            scenario=scenario,
            workspace=str(folder),
            # The built-in script's summary follows what happened (a cancelled tester).
            middleware=(HonestSummary(),) if opts.scenario is None else (),
        )
        if not opts.json:
            _intro(folder, live=shows_live_view(opts), picker=is_interactive(opts))
        return run_command(lambda: run_prompt(demo_opts, DEMO_PROMPT), debug=opts.debug)
    finally:
        shutil.rmtree(scenario_dir, ignore_errors=True)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def _intro(folder: Path, *, live: bool, picker: bool) -> None:
    if live:
        from rich.markup import escape

        from ._options import make_console

        hint = (
            "[dim]Try [/][bold]Ctrl+C[/][dim] while the tester runs its integration check "
            "(about 10 s): pick [/][bold]tester tu-1.3[/][dim] from the list to cancel that "
            "sub-agent alone, or type s and its number to stop it gracefully (its check "
            "finishes first); the others carry on.[/]\n"
            if picker
            else ""
        )
        make_console().print(
            "[bold]trio-agents demo[/] — a scripted main agent reviews a small project with "
            "parallel sub-agents\n"
            f"[dim]workspace {escape(str(folder))} · scripted provider: no key, no network[/]\n"
            + hint,
            highlight=False,
        )
    else:
        print(f"trio-agents demo: a scripted review of a small project in {folder}")
        sys.stdout.flush()


TESTS_LINE = "- **Tests**: "
"""Where the built-in script's summary speaks of the tester (the last line of main's last turn)."""
TESTER_CANCELLED = (
    "- **Tests**: not run to the end: the tester was {how} ({reason}); its partial work "
    "is in the tree above."
)


class HonestSummary:
    """A model-call middleware (docs/python-api.md, "Middleware") for the built-in demo: its
    closing summary does not point at a tester's report that does not exist. When the tester's
    subtree was cancelled (Ctrl+C in the demo), the summary's test line says so instead;
    everything else is the script, as played."""

    async def model_call(self, request: Any, proceed: Any) -> AsyncGenerator[Any, None]:
        """The script's turn; main's summary line about the tests rewritten if need be.

        Cancellation: as the scripted provider's (a checkpoint between deltas).
        """
        from runtime.core import TextChunk, TurnEnd
        from runtime.providers import chunk_text

        ended = _tester_cancelled(request.messages) if request.agent_type == "main" else None
        text = ""
        sent = 0  # characters of *text* already streamed
        held: str | None = None  # what replaces the rest, once the test line has begun
        async for item in proceed(request):
            if ended is not None and isinstance(item, TextChunk):
                text += item.text
                if held is None and TESTS_LINE in text:
                    start = text.index(TESTS_LINE)
                    how, reason = ended
                    line = TESTER_CANCELLED.format(how=how, reason=reason)
                    held = (text[:start] + line)[sent:]
                if held is not None:
                    continue  # the line is replaced at the turn's end
                sent = len(text)
            elif held is not None and isinstance(item, TurnEnd):
                for piece in chunk_text(held):
                    yield TextChunk(piece)
            yield item


_STOPPED_HEAD = "sub-agent tester was stopped: "
_STOPPED_TAIL = ", before it finished its task"


def _tester_cancelled(messages: Any) -> tuple[str, str] | None:
    """``("cancelled" or "stopped", reason)`` when the ``tester`` sub-agent's call came back
    cancelled or stopped (docs/collaboration.md#partial-work), else None."""
    from runtime.core import ToolResultBlock, ToolUseBlock, cancel_reason_of

    calls = {
        block.id
        for message in messages
        for block in message.content
        if isinstance(block, ToolUseBlock) and block.input.get("agent") == "tester"
    }
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolResultBlock) and block.tool_use_id in calls:
                first = block.content.partition("\n")[0]
                if first.startswith("cancelled"):
                    return "cancelled", cancel_reason_of(first).rstrip(".") or "no reason"
                if first.startswith(_STOPPED_HEAD):
                    reason = first.removeprefix(_STOPPED_HEAD).removesuffix(_STOPPED_TAIL)
                    return "stopped", reason or "no reason"
    return None
