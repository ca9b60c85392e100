"""Secure computation for cross-party statistics: Paillier keys, fixed-point packing, masked products.

Public entry points (see ``docs/secure_products.md``):

* keys -- :func:`generate_keypair`, :func:`public_key_to_bytes`, :func:`public_key_from_bytes`,
  :func:`validate_ciphertext`;
* protocol roles -- :class:`ProductEncryptor`, :class:`ProductResponder`, messages
  :class:`EncryptedBlock`, :class:`MaskedResponse`, :func:`combine_packed_shares` (the coordinator's range-checked
  combination of the packed shares), :func:`add_packed`, :func:`combine_shares`, :func:`choose_encryptor`;
* in-process runs -- :func:`secure_gram`, :func:`secure_label_products`, :func:`run_secure_product`;
* integer DP noise -- :func:`discrete_gaussian_array`, :func:`discrete_laplace_array`;
* secure aggregation (capeFM's zero-sum noise) -- :class:`SecAggSite`, :class:`SecAggAggregator`,
  :func:`secure_sum`.
"""

from __future__ import annotations

from vfl.lazy import lazy_names

#: public name -> defining module, imported on first use (PEP 562) so that importing one light submodule
#: (``vfl.secure.fastmath``'s names, ``vfl.secure.encoding``) does not load Paillier and the product machinery.
_LAZY = {
    **dict.fromkeys(("SECAGG_PRECISION_BITS", "SecAggAggregator", "SecAggSite", "secure_sum",
                     "validate_public_value"), "vfl.secure.aggregation"),
    **dict.fromkeys(("discrete_gaussian_array", "discrete_laplace_array"), "vfl.secure.discrete_noise"),
    **dict.fromkeys(("DEFAULT_PRECISION_BITS", "inner_product_error_bound"), "vfl.secure.encoding"),
    **dict.fromkeys(("MIN_KEY_BITS", "generate_keypair", "key_fingerprint", "public_key_from_bytes",
                     "public_key_to_bytes", "validate_ciphertext"), "vfl.secure.keys"),
    "SlotLayout": "vfl.secure.packing",
    **dict.fromkeys(("EncryptedBlock", "MaskedResponse", "ProductEncryptor", "ProductResponder", "ProductRun",
                     "add_packed", "centring_constant", "choose_encryptor", "combine_packed_shares", "combine_shares",
                     "pack_slots", "product_cost", "run_secure_product", "secure_gram", "secure_label_products"),
                    "vfl.secure.products"),
}

__all__ = sorted(_LAZY)


# ``vfl.secure.X`` for a name of _LAZY: imported from its module on first use and cached here (vfl.lazy)
__getattr__, __dir__ = lazy_names('vfl.secure', globals(), _LAZY)
