"""`make run`'s ready block (shared/launch.py): it says whether calls need a key and shows how
to pass one — AUTH_KEYS_FILE as well as AUTH_TOKEN."""

from __future__ import annotations

from shared.launch import environments, ready_block


def _block(**env: str) -> str:
    return ready_block(
        environments({"RETRIEVAL_PORT": "50051", "ORCHESTRATOR_PORT": "50052", **env})
    )


def test_without_auth_the_block_says_off_and_passes_no_key() -> None:
    block = _block()
    assert "auth off" in block and "auth on" not in block
    assert "authorization" not in block and "SUPERMEW_API_KEY" not in block


def test_a_keys_file_turns_auth_on_and_the_commands_show_the_key() -> None:
    block = _block(AUTH_KEYS_FILE="/etc/supermew/keys.yaml")
    assert block.count("auth on") == 2
    assert "export SUPERMEW_API_KEY=" in block
    assert '-H "authorization: Bearer $SUPERMEW_API_KEY"' in block


def test_a_token_turns_auth_on_and_grpcurl_sends_it() -> None:
    block = _block(AUTH_TOKEN="t")
    assert block.count("auth on") == 2
    assert '-H "authorization: Bearer $AUTH_TOKEN"' in block
    assert "export SUPERMEW_API_KEY" not in block
