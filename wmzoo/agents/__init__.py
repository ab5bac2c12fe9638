"""Policies trained in imagination. Each registers through the ``wmzoo_policies`` hook."""
