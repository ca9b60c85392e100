"""Networking (layer: net): wire messages, ZeroMQ transport, the runtime and the roles.

The roles (:mod:`vfl.net.coordinator`, :mod:`vfl.net.party`) are drivers: registration, liveness, relaying and
writing results. ZeroMQ is imported only in this package and the faces.
"""
