"""Suite-wide pytest settings: hardware tests run only when TG_HW=1."""

import os

import pytest

pytest_plugins = ["pytester"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("TG_HW") == "1":
        return
    skip_hw = pytest.mark.skip(reason="needs real hardware; set TG_HW=1 to run")
    for item in items:
        if "hw" in item.keywords:
            item.add_marker(skip_hw)
