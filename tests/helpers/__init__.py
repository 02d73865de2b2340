"""What several test files share: configs, harnesses and builders (imported as `tests.helpers.<module>`).

Test files import from here, never from one another, so each helper is loaded under one module name.
"""
