"""Signing in with a passkey (WebAuthn), and registering one from a signed-in session.

Every check of a response is py_webauthn's (`webauthn`): the challenge, the origin, the relying
party id, user presence and verification (required), the signature (ES256, EdDSA or RS256) and the
sign counter. What it can't know is kept here: each challenge is the server's own, used once and
only for a few minutes (`pheby.store.passkeys.ChallengeStore`); a registration's challenge belongs
to the session that asked for it; a sign-in's counter update is conditional, so of two uses of one
assertion only one can win; sign-in failures are limited per address.

Sign-in uses discoverable credentials: the options name no user, and the browser offers the
passkeys it holds for this relying party. A passkey is added only from a signed-in session that
authenticated recently (`pheby.signin.recent`), so a first credential always comes from elsewhere.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import msgspec
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import generate_challenge, options_to_json_dict, parse_client_data_json
from webauthn.helpers.base64url_to_bytes import base64url_to_bytes
from webauthn.helpers.cose import COSEAlgorithmIdentifier
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from pheby.auth import Principal
from pheby.db import Database
from pheby.errors import BadRequest, Conflict, RateLimited, Unauthorized
from pheby.signin.relying_party import RelyingParty
from pheby.store.accounts import Account, Accounts
from pheby.store.lockout import FailureLimiter, taking_turns
from pheby.store.passkeys import ChallengeStore, Passkey, PasskeyStore

SUPPORTED_ALGORITHMS = [
    COSEAlgorithmIdentifier.ECDSA_SHA_256,  # ES256
    COSEAlgorithmIdentifier.EDDSA,  # Ed25519
    COSEAlgorithmIdentifier.RSASSA_PKCS1_v1_5_SHA_256,  # RS256
]
TIMEOUT_MS = 120_000
# What py_webauthn's parsing of untrusted bytes (CBOR, COSE, JSON, DER) may raise besides its own errors: a
# refusal each, never a 500.
MALFORMED = (WebAuthnException, ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError)
_KNOWN_TRANSPORTS = {t.value for t in AuthenticatorTransport}

# base64url, as WebAuthn's JSON forms carry binary (padding tolerated); bounded like every string in.
Base64Url = Annotated[str, msgspec.Meta(max_length=16_384, pattern="^[A-Za-z0-9_-]*={0,2}$")]
Transport = Annotated[str, msgspec.Meta(max_length=32)]


# The credential structs leave unknown fields alone: browsers' `toJSON()` adds some (clientExtensionResults,
# publicKey, publicKeyAlgorithm...) that this server doesn't read. Their request bodies forbid unknown fields.
class AttestationResponse(msgspec.Struct, frozen=True):
    client_data_json: Base64Url = msgspec.field(name="clientDataJSON")
    attestation_object: Base64Url = msgspec.field(name="attestationObject")
    transports: Annotated[tuple[Transport, ...], msgspec.Meta(max_length=8)] = ()


class RegistrationCredential(msgspec.Struct, frozen=True):
    """What `navigator.credentials.create()` resolved with, in its JSON form."""

    id: Base64Url
    raw_id: Base64Url = msgspec.field(name="rawId")
    type: Annotated[str, msgspec.Meta(max_length=32)]
    response: AttestationResponse
    authenticator_attachment: Annotated[str, msgspec.Meta(max_length=32)] | None = msgspec.field(
        default=None, name="authenticatorAttachment"
    )


class AssertionResponse(msgspec.Struct, frozen=True):
    client_data_json: Base64Url = msgspec.field(name="clientDataJSON")
    authenticator_data: Base64Url = msgspec.field(name="authenticatorData")
    signature: Base64Url
    user_handle: Base64Url | None = msgspec.field(default=None, name="userHandle")


class AuthenticationCredential(msgspec.Struct, frozen=True):
    """What `navigator.credentials.get()` resolved with, in its JSON form."""

    id: Base64Url
    raw_id: Base64Url = msgspec.field(name="rawId")
    type: Annotated[str, msgspec.Meta(max_length=32)]
    response: AssertionResponse
    authenticator_attachment: Annotated[str, msgspec.Meta(max_length=32)] | None = msgspec.field(
        default=None, name="authenticatorAttachment"
    )


class PasskeyRefused(Unauthorized):
    code = "passkey_refused"
    default_message = "That passkey was not accepted"


class RegistrationRefused(BadRequest):
    """Not 401: the session is fine, the authenticator's answer is not."""

    code = "passkey_registration_refused"
    default_message = "That passkey could not be added"


class PasskeySignInGuard:
    """Failed passkey sign-ins, per address: 10 a minute, then 429 with Retry-After."""

    WAIT_SECONDS = 3.0  # for the address's turn, as a login waits for its own

    def __init__(self, db: Database) -> None:
        self.by_address = FailureLimiter(db, "passkey", limit=10, window=60.0)

    @asynccontextmanager
    async def attempt(self, address: str) -> AsyncIterator[None]:
        """One attempt, after the address's earlier ones (so each sees their failures); refused while locked."""
        async with taking_turns(
            ((self.by_address, address),),
            wait=self.WAIT_SECONDS,
            busy="Too many passkey sign-ins at once; try again in a few seconds",
            locked="Too many failed passkey sign-ins; try again later",
        ):
            try:
                yield
            except PasskeyRefused:
                await self.by_address.record_failure(address)
                raise


def _challenge_of(client_data_json: str) -> bytes | None:
    """The challenge a response answers, read from its client data (by py_webauthn's parser); None if unreadable."""
    try:
        return parse_client_data_json(base64url_to_bytes(client_data_json)).challenge
    except (WebAuthnException, ValueError, TypeError):
        return None


def _descriptor(passkey: Passkey) -> PublicKeyCredentialDescriptor:
    transports = [AuthenticatorTransport(t) for t in passkey.transports if t in _KNOWN_TRANSPORTS]
    return PublicKeyCredentialDescriptor(id=passkey.credential_id, transports=transports or None)


class Passkeys:
    """The passkeys of every account: registration, sign-in, and the challenges in between."""

    def __init__(self, db: Database, accounts: Accounts) -> None:
        self.store = PasskeyStore(db)
        self.challenges = ChallengeStore(db)
        self.guard = PasskeySignInGuard(db)
        self._accounts = accounts

    async def registration_options(self, rp: RelyingParty, principal: Principal) -> dict[str, Any]:
        """`PublicKeyCredentialCreationOptionsJSON` for the caller's account: a discoverable credential,
        user verification required, none of the account's passkeys again."""
        account = principal.account
        challenge = generate_challenge()
        if not await self.challenges.put(challenge, "register", account_id=account.id, token_id=principal.token_id):
            raise RateLimited("Too many passkey registrations begun; finish one, or try again in a few minutes")
        options = generate_registration_options(
            rp_id=rp.id,
            rp_name=rp.name,
            user_name=account.name,
            # The account's id: random, and the same for all its passkeys (so an authenticator keeps one per account).
            user_id=account.id.encode(),
            challenge=challenge,
            timeout=TIMEOUT_MS,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.REQUIRED,
                user_verification=UserVerificationRequirement.REQUIRED,
            ),
            exclude_credentials=[_descriptor(p) for p in await self.store.of_account(account.id)],
            supported_pub_key_algs=SUPPORTED_ALGORITHMS,
        )
        return options_to_json_dict(options)

    async def register(
        self, rp: RelyingParty, principal: Principal, credential: RegistrationCredential, name: str
    ) -> Passkey:
        """Verify a registration response to one of this session's challenges and keep the passkey."""
        challenge = _challenge_of(credential.response.client_data_json)
        taken = None if challenge is None else await self.challenges.take(challenge, "register")
        if taken is None or taken.account_id != principal.account.id or taken.token_id != principal.token_id:
            raise RegistrationRefused("That registration answers no challenge of this session (or an expired one)")
        try:
            verified = verify_registration_response(
                credential=msgspec.to_builtins(credential),
                expected_challenge=taken.challenge,
                expected_rp_id=rp.id,
                expected_origin=rp.origin,
                require_user_verification=True,
                supported_pub_key_algs=SUPPORTED_ALGORITHMS,
            )
        except MALFORMED as exc:
            raise RegistrationRefused(f"That passkey could not be added: {_reason(exc)}") from None
        passkey = await self.store.add(
            principal.account.id,
            credential_id=verified.credential_id,
            public_key=verified.credential_public_key,
            sign_count=verified.sign_count,
            transports=tuple(t for t in credential.response.transports if t in _KNOWN_TRANSPORTS),
            name="".join(c for c in name if c.isprintable()).strip() or "Passkey",
        )
        if passkey is None:
            raise Conflict("That passkey is registered already")
        return passkey

    async def sign_in_options(self, rp: RelyingParty) -> dict[str, Any]:
        """`PublicKeyCredentialRequestOptionsJSON`: no user named (discoverable credentials), verification required."""
        challenge = generate_challenge()
        if not await self.challenges.put(challenge, "sign_in"):
            raise RateLimited("Too many passkey sign-ins at once; try again in a minute", retry_after=60)
        options = generate_authentication_options(
            rp_id=rp.id,
            challenge=challenge,
            timeout=TIMEOUT_MS,
            user_verification=UserVerificationRequirement.REQUIRED,
        )
        return options_to_json_dict(options)

    async def sign_in(self, rp: RelyingParty, credential: AuthenticationCredential) -> Account:
        """The enabled account whose passkey signed one of the server's open challenges; else `PasskeyRefused`."""
        challenge = _challenge_of(credential.response.client_data_json)
        taken = None if challenge is None else await self.challenges.take(challenge, "sign_in")
        if taken is None:
            raise PasskeyRefused("That sign-in answers no open challenge (a used or expired one, or none of ours)")
        try:
            credential_id = base64url_to_bytes(credential.raw_id)
            user_handle = _optional_bytes(credential.response.user_handle)
        except ValueError:
            raise PasskeyRefused("That passkey response is malformed") from None
        passkey = await self.store.by_credential_id(credential_id)
        if passkey is None:
            raise PasskeyRefused("That passkey is not registered here")
        if user_handle is not None and user_handle != passkey.account_id.encode():
            raise PasskeyRefused("That passkey belongs to another account")
        try:
            verified = verify_authentication_response(
                credential=msgspec.to_builtins(credential),
                expected_challenge=taken.challenge,
                expected_rp_id=rp.id,
                expected_origin=rp.origin,
                credential_public_key=passkey.public_key,
                credential_current_sign_count=passkey.sign_count,
                require_user_verification=True,
            )
        except MALFORMED as exc:
            raise PasskeyRefused(f"That passkey was not accepted: {_reason(exc)}") from None
        if not await self.store.record_use(passkey, verified.new_sign_count):
            raise PasskeyRefused("That passkey was used by another sign-in at the same moment")
        account = await self._accounts.get(passkey.account_id)
        if account.disabled:
            raise PasskeyRefused("That account is disabled")
        return account


def _optional_bytes(value: str | None) -> bytes | None:
    return None if value is None else base64url_to_bytes(value)


def _reason(exc: Exception) -> str:
    """py_webauthn's own sentence for a refusal (no secrets in it: counts, origins, algorithm ids), bounded."""
    text = str(exc) if isinstance(exc, WebAuthnException) else "the response is malformed"
    return text[:200] or "the response did not verify"
