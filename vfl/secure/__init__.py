"""Secure computation for cross-party statistics: Paillier keys, fixed-point packing, masked products.

Public entry points (see ``docs/secure_products.md``):

* keys -- :func:`generate_keypair`, :func:`public_key_to_bytes`, :func:`public_key_from_bytes`,
  :func:`validate_ciphertext`;
* protocol roles -- :class:`ProductEncryptor`, :class:`ProductResponder`, messages
  :class:`EncryptedBlock`, :class:`MaskedResponse`, :func:`combine_shares`, :func:`choose_encryptor`;
* in-process runs -- :func:`secure_gram`, :func:`secure_label_products`, :func:`run_secure_product`;
* integer DP noise -- :func:`discrete_gaussian_array`, :func:`discrete_laplace_array`;
* secure aggregation (capeFM's zero-sum noise) -- :class:`SecAggSite`, :class:`SecAggAggregator`,
  :func:`secure_sum`.
"""

from vfl.secure.aggregation import (
    SECAGG_PRECISION_BITS,
    SecAggAggregator,
    SecAggSite,
    secure_sum,
    validate_public_value,
)
from vfl.secure.discrete_noise import discrete_gaussian_array, discrete_laplace_array
from vfl.secure.encoding import DEFAULT_PRECISION_BITS, inner_product_error_bound
from vfl.secure.keys import (
    MIN_KEY_BITS,
    generate_keypair,
    key_fingerprint,
    public_key_from_bytes,
    public_key_to_bytes,
    validate_ciphertext,
)
from vfl.secure.packing import SlotLayout
from vfl.secure.products import (
    EncryptedBlock,
    MaskedResponse,
    ProductEncryptor,
    ProductResponder,
    ProductRun,
    choose_encryptor,
    combine_shares,
    product_cost,
    run_secure_product,
    secure_gram,
    secure_label_products,
)

__all__ = [
    "SECAGG_PRECISION_BITS", "SecAggAggregator", "SecAggSite", "secure_sum", "validate_public_value",
    "DEFAULT_PRECISION_BITS", "MIN_KEY_BITS", "EncryptedBlock", "MaskedResponse", "ProductEncryptor",
    "ProductResponder", "ProductRun", "SlotLayout", "choose_encryptor", "combine_shares",
    "discrete_gaussian_array", "discrete_laplace_array", "generate_keypair", "inner_product_error_bound",
    "key_fingerprint", "product_cost", "public_key_from_bytes", "public_key_to_bytes", "run_secure_product",
    "secure_gram", "secure_label_products", "validate_ciphertext",
]
