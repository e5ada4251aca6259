"""The credential the gateway presents to its pool's pods (setting ``pod_auth``).

- ``forward``: the client's ``Authorization`` header goes to the pod unchanged (pods that
  check their own keys, e.g. vLLM ``--api-key``, see what the client sent). Not allowed
  together with a gateway key file: the header then carries a Headroom key, which the pods
  have no business seeing.
- ``inject``: every pod request carries ``Authorization: Bearer <pod key>``, the pool's key
  read from ``pod_api_key_file`` (re-read when the file changes, e.g. a rotated Kubernetes
  Secret) or from ``pod_api_key`` (the ``HEADROOM_GATEWAY_POD_API_KEY`` variable). The
  client's own header is never forwarded.
- ``none``: pod requests carry no ``Authorization``.

The key is held as a :class:`pydantic.SecretStr` in the settings (masked in any repr), is
never logged, never put on a span or a metric, and never echoed in an error body: the
pod's own 401 for a wrong key is what the client sees, and it names no key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Literal

from shared.watched_file import WatchedFile

log = logging.getLogger(__name__)

PodAuthMode = Literal["forward", "inject", "none"]


class PodCredentialError(ValueError):
    pass


class PodCredentials:
    """``authorization(client_headers)``: the ``Authorization`` value for a pod request
    (None: send none)."""

    def __init__(self, mode: PodAuthMode, key: str = "", key_file: str = "") -> None:
        self.mode = mode
        self._file = WatchedFile(key_file) if key_file else None
        self._value: str | None = None
        if mode == "inject":
            if bool(key) == bool(key_file):
                raise PodCredentialError(
                    "pod_auth=inject needs exactly one of pod_api_key_file and pod_api_key "
                    "(HEADROOM_GATEWAY_POD_API_KEY_FILE / HEADROOM_GATEWAY_POD_API_KEY)"
                )
            if key:
                self._value = self._bearer(key, "HEADROOM_GATEWAY_POD_API_KEY")
        elif key or key_file:
            raise PodCredentialError(
                f"a pod API key is configured but pod_auth is {mode!r}: set pod_auth=inject "
                "to send it"
            )

    @property
    def watches_file(self) -> bool:
        return self._file is not None

    @staticmethod
    def _bearer(key: str, source: str) -> str:
        key = key.strip()
        if not key or any(c in key for c in "\r\n") or not key.isascii():
            raise PodCredentialError(f"{source}: the pod API key must be one line of ASCII")
        return f"Bearer {key}"

    def load(self) -> None:
        """Read the key file at start-up; raises PodCredentialError (start-up fails)."""
        if self._file is not None:
            self._file.check()
            self._value = self._read()

    def _read(self) -> str:
        assert self._file is not None
        try:
            text = self._file.read()
        except (OSError, UnicodeDecodeError) as e:  # the message names the file, not the key
            raise PodCredentialError(
                f"{self._file.path}: unreadable ({type(e).__name__})"
            ) from None
        return self._bearer(text, str(self._file.path))

    def reload_if_changed(self) -> None:
        """Re-read a changed key file; a bad file keeps the old key (logged, not the key)."""
        if self._file is None or not self._file.check():
            return
        try:
            self._value = self._read()
        except PodCredentialError as e:
            log.error("pod API key not reloaded, keeping the previous one: %s", e)
            return
        log.info("pod API key reloaded from %s", self._file.path)

    def authorization(self, client_headers: Mapping[str, str]) -> str | None:
        if self.mode == "inject":
            return self._value
        if self.mode == "forward":
            return client_headers.get("authorization")
        return None
