"""The built-in policies, written on the public API (controller.policy) like any plug-in."""
