"""Differential-privacy mathematics (layer: core, above :mod:`vfl.fm`).

* :mod:`vfl.privacy.calibration` – Gaussian / Laplace calibration primitives.
* :mod:`vfl.privacy.sensitivity` – per-order and per-block sensitivities.
* :mod:`vfl.privacy.mechanisms` – the FM release mechanisms (none, laplace-fm, gaussian-fm, relaxed-fm).
* :mod:`vfl.privacy.fixed_point` – the networked release on the fixed-point grid with exact discrete noise.
* :mod:`vfl.privacy.accounting` – privacy reports and composition.
* :mod:`vfl.privacy.ledger` – a party's persistent privacy ledger and lifetime budget (SQLite).
* :mod:`vfl.privacy.cape_accounting` – CAPE noise shares and accounting.
* :mod:`vfl.privacy.ica_accounting` – multi-round accounting (dp-accounting RDP/PLD, moments, strong composition).
* :mod:`vfl.privacy.audit` – statistical privacy audit (``python -m vfl.privacy.audit``).
"""
