"""Imports as jobs (docs/api.md#imports): the request's checks (`request`), what a source is
(`source`) and one import's run (`job`). The runner that claims jobs and keeps their
operations is retrieval_service/imports.py; the sources themselves are adapters."""
