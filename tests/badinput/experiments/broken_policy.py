"""A policy module that fails while importing: it needs a package that is not installed."""
import a_package_that_is_not_installed  # noqa: F401

from controller.policy import Policy


class Broken(Policy):
    pass
