"""Where an import reads its documents (docs/api.md#imports): `file://` folders and files under
IMPORT_ROOTS, `http(s)://` URLs under IMPORT_URL_PREFIXES. A uri the settings do not allow is
refused when the import is requested (PERMISSION_DENIED naming the uri and the setting); a
malformed one is INVALID_ARGUMENT naming `uris[i]`. Listing and reading happen in the job.

Each listed document is an `Entry`: its document_id (the path relative to the source, or the
URL), the file name the ingest parses it by, and a change hint (size, mtime and sidecar) that
lets an unchanged file be skipped without being read."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from retrieval_service.core.imports.source import (
    SIDECAR_SUFFIX,
    Entry,
    Listing,
    Read,
    Source,
    parse_sidecar,
    supported,
)
from shared.errors import DependencyUnavailable, InvalidArgument, NotFound, PermissionDenied

MAX_REDIRECTS = 5
#: A content type → the extension the ingest parses a URL's body by, when its path has none.
_EXTENSION_OF_TYPE = {
    "text/html": ".html",
    "text/markdown": ".md",
    "text/plain": ".txt",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
}


@dataclass(frozen=True, slots=True)
class ImportPolicy:
    """What the settings allow: IMPORT_ROOTS, IMPORT_URL_PREFIXES, MAX_DOCUMENT_BYTES and the
    per-request timeout of a URL."""

    roots: tuple[Path, ...] = ()
    url_prefixes: tuple[str, ...] = ()
    max_document_bytes: int = 20 * 1024 * 1024
    url_timeout_seconds: float = 30.0
    s3_endpoint_url: str | None = None
    _s3: list[Any] = field(default_factory=list, compare=False, repr=False)

    def s3_client(self) -> Any:
        """One boto3 S3 client (thread-safe), made at the first S3 import: credentials and
        region from the standard AWS variables, the endpoint from S3_ENDPOINT_URL."""
        if not self._s3:
            import boto3  # only where S3 is used: it loads slowly
            from botocore.config import Config

            config = Config(
                connect_timeout=self.url_timeout_seconds,
                read_timeout=self.url_timeout_seconds,
                retries={"max_attempts": 3, "mode": "standard"},
            )
            self._s3.append(
                boto3.session.Session().client(
                    "s3", endpoint_url=self.s3_endpoint_url or None, config=config
                )
            )
        return self._s3[0]

    @classmethod
    def of(
        cls,
        roots: str | None,
        url_prefixes: str | None,
        max_document_bytes: int,
        url_timeout_seconds: float = 30.0,
        s3_endpoint_url: str | None = None,
    ) -> ImportPolicy:
        return cls(
            roots=tuple(Path(r).resolve() for r in _listed(roots)),
            url_prefixes=tuple(_listed(url_prefixes)),
            max_document_bytes=max_document_bytes,
            url_timeout_seconds=url_timeout_seconds,
            s3_endpoint_url=s3_endpoint_url,
        )


def _listed(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


# ---- file:// --------------------------------------------------------------------------------


class FileSource:
    """A file or a folder (read recursively; hidden files and folders skipped) under one of
    IMPORT_ROOTS; a symlink whose target leaves the root is refused, never followed out."""

    def __init__(self, uri: str, path: Path, root: Path, max_bytes: int) -> None:
        self.uri = uri
        self._path = path
        self._root = root
        self._max_bytes = max_bytes

    async def listing(self) -> Listing:
        return await asyncio.to_thread(self._list)

    def _list(self) -> Listing:
        out = Listing()
        if not self._path.exists():
            raise InvalidArgument("uris", f"{self.uri}: no such file or folder")
        if self._path.is_file():
            files = [(self._path.name, self._path)]
        else:
            files = sorted(
                (p.relative_to(self._path).as_posix(), p)
                for p in self._path.rglob("*")
                if not any(part.startswith(".") for part in p.relative_to(self._path).parts)
                and (p.is_file() or p.is_symlink())
            )
        names = {relative for relative, _ in files}
        for relative, path in files:
            if relative.endswith(SIDECAR_SUFFIX):
                if relative.removesuffix(SIDECAR_SUFFIX) not in names:
                    out.skipped.append(path.as_uri())
                continue
            if not supported(path.name):
                out.skipped.append(path.as_uri())
                continue
            entry = Entry(
                uri=path.as_uri(),
                document_id=relative,
                filename=path.name,
                sidecar=relative + SIDECAR_SUFFIX if relative + SIDECAR_SUFFIX in names else "",
            )
            if not _inside(path.resolve(), self._root):
                out.refused.append((entry, "is a symlink leaving the import root"))
                continue
            out.entries.append(_with_hint(entry, path))
        return out

    async def read(self, entry: Entry) -> Read:
        return await asyncio.to_thread(self._read, entry)

    def _read(self, entry: Entry) -> Read:
        base = self._path if self._path.is_dir() else self._path.parent
        path = base / entry.document_id if self._path.is_dir() else self._path
        real = path.resolve()
        if not _inside(real, self._root):  # changed into a symlink since the listing
            raise PermissionDenied(f"{entry.uri}: is a symlink leaving the import root")
        size = real.stat().st_size
        if size > self._max_bytes:
            raise InvalidArgument(
                "content", f"is {size} bytes, at most {self._max_bytes} (MAX_DOCUMENT_BYTES)"
            )
        content = real.read_bytes()
        sidecar = None
        if entry.sidecar:
            sidecar_path = (base / entry.sidecar).resolve()
            if not _inside(sidecar_path, self._root):
                raise PermissionDenied(f"{entry.uri}: its sidecar leaves the import root")
            sidecar = parse_sidecar(sidecar_path.read_bytes(), sidecar_path.name)
        return Read(content, entry.filename, sidecar)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _with_hint(entry: Entry, path: Path) -> Entry:
    """The file's size and mtime, and its sidecar's: the same hint means the same bytes."""
    stat = path.stat()
    hint = f"{stat.st_size}:{stat.st_mtime_ns}"
    if entry.sidecar:
        sidecar = path.with_name(path.name + SIDECAR_SUFFIX).stat()
        hint += f";{sidecar.st_size}:{sidecar.st_mtime_ns}"
    return Entry(entry.uri, entry.document_id, entry.filename, hint, entry.sidecar)


# ---- http(s):// -----------------------------------------------------------------------------


class UrlSource:
    """One document per URL; every redirect must stay under IMPORT_URL_PREFIXES, and the body
    is cut off (the document failed) past MAX_DOCUMENT_BYTES, counted while it streams."""

    def __init__(self, uri: str, policy: ImportPolicy, client: httpx.AsyncClient) -> None:
        self.uri = uri
        self._policy = policy
        self._client = client

    async def listing(self) -> Listing:
        name = PurePosixPath(unquote(urlsplit(self.uri).path)).name or "index.html"
        return Listing(entries=[Entry(uri=self.uri, document_id=self.uri, filename=name)])

    async def read(self, entry: Entry) -> Read:
        url = entry.uri
        for _ in range(MAX_REDIRECTS + 1):
            if not _allowed_url(url, self._policy.url_prefixes):
                raise PermissionDenied(
                    f"{entry.uri}: redirected to a URL outside IMPORT_URL_PREFIXES"
                )
            try:
                async with self._client.stream(
                    "GET", url, timeout=self._policy.url_timeout_seconds
                ) as response:
                    if response.is_redirect:
                        url = urljoin(url, response.headers.get("location", ""))
                        continue
                    if response.status_code in (404, 410):
                        raise NotFound("uris", f"{entry.uri} answered HTTP {response.status_code}")
                    if response.status_code != 200:
                        raise DependencyUnavailable(
                            "source", f"{entry.uri} answered HTTP {response.status_code}"
                        )
                    content = await self._body(response, entry.uri)
                    return Read(content, _url_filename(entry.filename, response), None)
            except httpx.HTTPError as exc:
                raise DependencyUnavailable(
                    "source", f"{entry.uri} could not be read ({type(exc).__name__})"
                ) from exc
        raise DependencyUnavailable("source", f"{entry.uri}: more than {MAX_REDIRECTS} redirects")

    async def _body(self, response: httpx.Response, uri: str) -> bytes:
        limit = self._policy.max_document_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise InvalidArgument(
                "content", f"{uri} is {declared} bytes, at most {limit} (MAX_DOCUMENT_BYTES)"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise InvalidArgument(
                    "content", f"{uri} is over {limit} bytes (MAX_DOCUMENT_BYTES)"
                )
            chunks.append(chunk)
        return b"".join(chunks)


def _url_filename(name: str, response: httpx.Response) -> str:
    if supported(name):
        return name
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    extension = _EXTENSION_OF_TYPE.get(kind, "")
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:200] or "document"
    return stem + extension if extension else name


def _allowed_url(url: str, prefixes: Sequence[str]) -> bool:
    return any(url.startswith(prefix) for prefix in prefixes)


# ---- the request's uris ---------------------------------------------------------------------


def open_source(
    uri: str, field_name: str, policy: ImportPolicy, client: httpx.AsyncClient
) -> Source:
    """The source `uri` names, once the settings allow it."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgument(field_name, f"{uri}: a file uri is file:///absolute/path")
        path = Path(unquote(parts.path))
        if not path.is_absolute() or ".." in path.parts:
            raise InvalidArgument(field_name, f"{uri}: a file uri is file:///absolute/path")
        if not policy.roots:
            raise PermissionDenied(f"{uri}: file imports are off (IMPORT_ROOTS is not set)")
        real = path.resolve()
        for root in policy.roots:
            if _inside(path, root) or _inside(real, root):
                if not _inside(real, root):
                    raise PermissionDenied(f"{uri}: is a symlink leaving IMPORT_ROOTS")
                return FileSource(uri, real, root, policy.max_document_bytes)
        raise PermissionDenied(f"{uri}: is not under IMPORT_ROOTS")
    if parts.scheme in ("http", "https"):
        if not parts.netloc:
            raise InvalidArgument(field_name, f"{uri}: not a URL")
        if not policy.url_prefixes:
            raise PermissionDenied(f"{uri}: URL imports are off (IMPORT_URL_PREFIXES is not set)")
        if not _allowed_url(uri, policy.url_prefixes):
            raise PermissionDenied(f"{uri}: is not under IMPORT_URL_PREFIXES")
        return UrlSource(uri, policy, client)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise InvalidArgument(field_name, f"{uri}: an s3 uri is s3://bucket/prefix")
        if not policy.url_prefixes:
            raise PermissionDenied(f"{uri}: S3 imports are off (IMPORT_URL_PREFIXES is not set)")
        if not _allowed_url(uri, policy.url_prefixes):
            raise PermissionDenied(f"{uri}: is not under IMPORT_URL_PREFIXES")
        return S3Source(uri, parts.netloc, parts.path.lstrip("/"), policy)
    raise InvalidArgument(field_name, f"{uri}: must be a file://, http://, https:// or s3:// uri")


# ---- s3:// ----------------------------------------------------------------------------------


class S3Source:
    """Every object under `s3://bucket/prefix` on S3_ENDPOINT_URL (unset: AWS), listed page by
    page, with the standard AWS credential variables; an object's ETag (and its sidecar's) is
    its change hint. Keys ending in `/` (folder markers) and hidden names are skipped."""

    def __init__(self, uri: str, bucket: str, prefix: str, policy: ImportPolicy) -> None:
        self.uri = uri
        self._bucket = bucket
        self._prefix = prefix
        self._policy = policy

    async def listing(self) -> Listing:
        return await asyncio.to_thread(self._list)

    def _list(self) -> Listing:
        objects: dict[str, tuple[str, str]] = {}  # relative path → (key, etag)
        pages = self._policy.s3_client().get_paginator("list_objects_v2")
        with _s3_errors(self.uri):
            for page in pages.paginate(Bucket=self._bucket, Prefix=self._prefix):
                for item in page.get("Contents", []):
                    key = item["Key"]
                    relative = _relative_key(key, self._prefix)
                    if key.endswith("/") or any(p.startswith(".") for p in relative.split("/")):
                        continue
                    objects[relative] = (key, item.get("ETag", "").strip('"'))
        out = Listing()
        for relative in sorted(objects):
            key, etag = objects[relative]
            object_uri = f"s3://{self._bucket}/{key}"
            if relative.endswith(SIDECAR_SUFFIX):
                if relative.removesuffix(SIDECAR_SUFFIX) not in objects:
                    out.skipped.append(object_uri)
                continue
            name = PurePosixPath(relative).name
            if not supported(name):
                out.skipped.append(object_uri)
                continue
            sidecar = objects.get(relative + SIDECAR_SUFFIX)
            hint = f"etag:{etag}" + (f";{sidecar[1]}" if sidecar else "")
            sidecar_key = sidecar[0] if sidecar else ""
            out.entries.append(Entry(object_uri, relative, name, hint if etag else "", sidecar_key))
        return out

    async def read(self, entry: Entry) -> Read:
        return await asyncio.to_thread(self._read, entry)

    def _read(self, entry: Entry) -> Read:
        key = entry.uri.removeprefix(f"s3://{self._bucket}/")
        content = self._get(key, entry.uri)
        sidecar = None
        if entry.sidecar:
            sidecar = parse_sidecar(self._get(entry.sidecar, entry.uri), entry.sidecar)
        return Read(content, entry.filename, sidecar)

    def _get(self, key: str, uri: str) -> bytes:
        limit = self._policy.max_document_bytes
        with _s3_errors(uri):
            found = self._policy.s3_client().get_object(Bucket=self._bucket, Key=key)
            size = int(found.get("ContentLength", 0))
            if size > limit:
                found["Body"].close()
                raise InvalidArgument(
                    "content", f"{uri} is {size} bytes, at most {limit} (MAX_DOCUMENT_BYTES)"
                )
            return bytes(found["Body"].read(limit + 1))


def _relative_key(key: str, prefix: str) -> str:
    """A key's path below the prefix: the prefix a folder (`docs` or `docs/`) or the key itself
    (its file name then)."""
    if key == prefix:
        return PurePosixPath(key).name
    return key[len(prefix) :].lstrip("/") if prefix else key


@contextlib.contextmanager
def _s3_errors(uri: str) -> Iterator[None]:
    """botocore's failures as domain errors naming the uri (never the credentials)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        yield
    except NoCredentialsError as exc:
        raise DependencyUnavailable(
            "s3", f"{uri}: no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        ) from exc
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchBucket", "NoSuchKey", "404"):
            raise NotFound("uris", f"{uri}: {code}") from exc
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
            raise PermissionDenied(f"{uri}: the object store refused access ({code})") from exc
        raise DependencyUnavailable("s3", f"{uri}: {code or 'error'}") from exc
    except BotoCoreError as exc:
        raise DependencyUnavailable("s3", f"{uri}: {type(exc).__name__}") from exc
