"""Push endpoints are URLs a client handed the server: never a way into the server's own network.

An endpoint must be `https`, with no credentials in it, on a host that is (or resolves only to)
public addresses: loopback, private, link-local, shared, multicast, reserved and unspecified ones are
refused, IPv4-mapped IPv6 included. The check runs when a subscription is made and again before every
send, and the send goes to the address that was checked (`Target.address`), so a name that resolves
elsewhere the second time (DNS rebinding) reaches nothing it should not. `PHEBY_PUSH_ALLOW_HOSTS`
lets named hosts through, `http` included: a test's or a private push service.
"""

import asyncio
import ipaddress
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from urllib.parse import urlsplit

ENDPOINT_MAX = 2048
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
RESOLVE_SECONDS = 5.0


class EndpointRefused(Exception):
    """The endpoint may not be called; the message says why, without echoing the URL."""


class Resolver(ABC):
    """Host name → addresses (an ABC, so a test can stand in for DNS, which it can't control here)."""

    @abstractmethod
    async def resolve(self, host: str, port: int) -> list[str]: ...


class SystemResolver(Resolver):
    async def resolve(self, host: str, port: int) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [str(info[4][0]) for info in infos]


@dataclass(frozen=True)
class Target:
    """Where one send goes: the endpoint as given, and the checked address to connect to."""

    endpoint: str
    host: str  # as in the URL: the TLS server name and the Host header
    address: str  # the address that was checked
    allowed_host: bool  # on PHEBY_PUSH_ALLOW_HOSTS: no address check was made

    @property
    def origin(self) -> str:
        parts = urlsplit(self.endpoint)
        return f"{parts.scheme}://{parts.netloc}"


def is_public(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


class EndpointPolicy:
    def __init__(self, allow_hosts: tuple[str, ...] = (), resolver: Resolver | None = None) -> None:
        self._allowed = frozenset(_normal_host(h) for h in allow_hosts)
        self._resolver = resolver or SystemResolver()

    def check_syntax(self, endpoint: str) -> tuple[str, int]:
        """The endpoint's host and port, or `EndpointRefused` for a URL that may never be called."""
        if len(endpoint) > ENDPOINT_MAX:
            raise EndpointRefused(f"endpoint is longer than {ENDPOINT_MAX} characters")
        try:
            parts = urlsplit(endpoint)
            port = parts.port
        except ValueError:
            raise EndpointRefused("endpoint is not a URL") from None
        host = _normal_host(parts.hostname or "")
        if not host or parts.username is not None or parts.password is not None or parts.fragment:
            raise EndpointRefused("endpoint must be a plain https URL")
        if parts.scheme == "http" and host in self._allowed:
            return host, port or 80
        if parts.scheme != "https":
            raise EndpointRefused("endpoint must be an https URL")
        return host, port or 443

    async def target(self, endpoint: str) -> Target:
        """Check the endpoint now (resolving its host) and name the address to send to."""
        host, port = self.check_syntax(endpoint)
        if host in self._allowed:
            return Target(endpoint, host, host, allowed_host=True)
        literal = _address(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                async with asyncio.timeout(RESOLVE_SECONDS):
                    found = await self._resolver.resolve(host, port)
            except (OSError, TimeoutError, UnicodeError):
                raise EndpointRefused("endpoint host does not resolve") from None
            addresses = [a for a in (_address(f) for f in found) if a is not None]
        if not addresses:
            raise EndpointRefused("endpoint host does not resolve")
        if not all(is_public(a) for a in addresses):  # one internal answer is enough to refuse the name
            raise EndpointRefused("endpoint host is not a public address")
        return Target(endpoint, host, str(addresses[0]), allowed_host=False)


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
