"""The graph's nodes (docs/trace.md#node-by-node), one module per step. Each is an async function of
the state and the LangGraph `Runtime[RunContext]`, returning the keys it changes."""

from typing import Final

#: LangGraph's END as a literal. langgraph types END as plain `str`, which a router's
#: `Literal[..., "__end__"]` return type rejects; this is the same string, typed as the literal
#: (tests/unit/test_orchestrator_graph.py checks that the two stay equal).
END_NODE: Final = "__end__"
