"""``vfl keys``: a key folder, adding a party to it, and the per-organisation bundles (docs/deployment.md).

A key folder made by ``vfl keys --out DIR --names a,b`` holds, per name, a CURVE certificate (``NAME.key`` public,
``NAME.key_secret`` secret; :func:`vfl.net.transport.write_certificates`) and an Ed25519 signing identity
(``NAME.sign.pub``, ``NAME.sign.secret``; :mod:`vfl.secure.identity`), plus the coordinator's CURVE certificate.
Nothing here ever overwrites a key:

* :func:`write_key_folder` refuses a folder that already holds a coordinator key, naming ``--add`` as the way to
  add parties to it;
* :func:`add_parties` adds parties to an existing folder (its coordinator key stays as it is, so running parties
  and the coordinator need nothing new except the newcomer's public files), refusing a name that has any key file;
* :func:`write_bundle` copies what one organisation's machine needs into ``DIR/bundle-ORG``: a party gets its own
  two secrets, ``coordinator.key`` and every party's ``NAME.sign.pub`` (the identities it pins); the coordinator
  gets ``coordinator.key_secret`` and every party's ``NAME.key`` (the keys it authorises). No bundle holds another
  organisation's secret.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import zmq.auth

from vfl.exceptions import ConfigurationError
from vfl.net.messages import validate_name
from vfl.net.transport import COORDINATOR_NAME, write_certificates
from vfl.secure.identity import PUBLIC_SUFFIX, SECRET_SUFFIX, write_identities

__all__ = ["write_key_folder", "add_parties", "write_bundle", "party_names", "bundle_files"]

#: the files one party's key set consists of (``vfl keys``)
PARTY_SUFFIXES = (".key", ".key_secret", PUBLIC_SUFFIX, SECRET_SUFFIX)


def party_names(folder: str | Path) -> list[str]:
    """The parties of a key folder: every ``NAME.sign.pub`` (the coordinator has no signing identity)."""
    return sorted(p.name[: -len(PUBLIC_SUFFIX)] for p in Path(folder).glob(f"*{PUBLIC_SUFFIX}"))


def write_key_folder(out: str | Path, names: list[str]) -> list[Path]:
    """A new key folder: the coordinator's CURVE certificate and each party's certificate and identity."""
    folder = Path(out)
    if (folder / f"{COORDINATOR_NAME}.key_secret").exists():
        raise ConfigurationError(f"{folder / (COORDINATOR_NAME + '.key_secret')} exists; refusing to overwrite a key "
                                 f"(to add parties to this folder: vfl keys --out {folder} --add NAME[,NAME...])")
    written = write_certificates(folder, names)
    return written + write_identities(folder, [n for n in names if n != COORDINATOR_NAME])


def add_parties(out: str | Path, names: list[str]) -> list[Path]:
    """Add parties to an existing key folder without touching any key in it: every name is checked before a file
    is written (a name with any key file already is refused, and so is a folder without a coordinator key)."""
    folder = Path(out)
    if not (folder / f"{COORDINATOR_NAME}.key").is_file():
        raise ConfigurationError(f"{folder} holds no {COORDINATOR_NAME}.key: --add adds parties to a folder made by "
                                 f"`vfl keys --out {folder} --names ...`")
    for name in names:
        validate_name(name)
        if name == COORDINATOR_NAME:
            raise ConfigurationError("--add takes party names; the coordinator's key exists already")
        taken = [folder / f"{name}{s}" for s in PARTY_SUFFIXES if (folder / f"{name}{s}").exists()]
        if taken:
            raise ConfigurationError(f"{taken[0]} exists; refusing to overwrite a key (party {name} is in this folder "
                                     "already)")
    written: list[Path] = []
    for name in names:
        pub, sec = zmq.auth.create_certificates(str(folder), name)
        os.chmod(sec, 0o600)
        written += [Path(pub), Path(sec)]
    return written + write_identities(folder, names)


def bundle_files(folder: str | Path, org: str) -> list[Path]:
    """The files of ``folder`` that organisation ``org`` (a party, or ``coordinator``) needs, and no other."""
    root = Path(folder)
    parties = party_names(root)
    if org == COORDINATOR_NAME:
        files = [root / f"{COORDINATOR_NAME}.key_secret", *(root / f"{p}.key" for p in parties)]
    elif org in parties:
        files = [root / f"{org}.key_secret", root / f"{org}{SECRET_SUFFIX}", root / f"{COORDINATOR_NAME}.key",
                 *(root / f"{p}{PUBLIC_SUFFIX}" for p in parties)]
    else:
        raise ConfigurationError(f"{org!r} is neither {COORDINATOR_NAME} nor a party of {root} (parties: "
                                 f"{', '.join(parties) or 'none'})")
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise ConfigurationError(f"{missing[0]} is missing: {root} is not a complete `vfl keys` folder")
    return files


def write_bundle(folder: str | Path, org: str) -> Path:
    """Copy what ``org``'s machine needs into ``FOLDER/bundle-ORG`` (a new folder, mode 0700; secrets 0600)."""
    validate_name(org)
    files = bundle_files(folder, org)
    dest = Path(folder) / f"bundle-{org}"
    try:
        dest.mkdir(mode=0o700)
    except FileExistsError:
        raise ConfigurationError(f"{dest} exists; refusing to overwrite it (move it away first)") from None
    for f in files:
        shutil.copyfile(f, dest / f.name)
        os.chmod(dest / f.name, 0o600 if "secret" in f.name else 0o644)
    return dest
