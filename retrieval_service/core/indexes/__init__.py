"""Index generations (docs/api.md#indexes): the indexes of a knowledge base, the generations of
chunk collections they live in, their builds and the switch between them."""
