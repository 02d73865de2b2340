"""The suite's two tiers (pyproject.toml says the rule): where tests/conftest.py keeps what a session collected."""
import pytest

# every test the session collected, before -m or -k left any out (tests/test_test_tiers.py reads them)
COLLECTED = pytest.StashKey[list]()
