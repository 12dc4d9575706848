"""Run history and feedback (docs/api.md#run-history): every Run and Resume recorded with its
trace when RUN_HISTORY is on, and what users thought of the answers."""
