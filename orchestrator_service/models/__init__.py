"""Model tasks of the workflow (API.md "Model calls") behind one `ModelClient` interface."""
