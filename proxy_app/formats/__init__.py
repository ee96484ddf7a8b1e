"""Wire-format adapters: pure functions, dict in / dict out, one module per format.

Each adapter module (``anthropic``, ``openai_chat``, ``openai_responses``, ``gemini``)
exposes the same functions; see ``types.py`` for the neutral shapes and the
contract every adapter follows. ``ADAPTERS`` maps a format name to its module.
"""

from __future__ import annotations
