"""The graph's nodes (SPEC.md §2), one module per step. Each is an async function of the state
and the LangGraph `Runtime[RunContext]`, returning the keys it changes."""
