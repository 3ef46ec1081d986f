"""The ``rest`` transport: Slurm's REST daemon, ``slurmrestd``, with a JWT.

Nothing runs on this machine and nothing needs Slurm's client commands. The API version is
negotiated from what the daemon offers (its OpenAPI document lists the ``/slurm/vX/`` paths;
tether takes the newest of :data:`VERSIONS` it finds). The token comes, in this order, from
``jwt_file``, the connection's secret, or ``SLURM_JWT`` (Slurm's own variable); the user
from ``user`` or the token's ``sun`` claim. TLS certificates are verified unless
``tls_verify`` is off; ``ca_file`` adds a CA bundle.

What the API does not offer is stated in :attr:`RestClient.capabilities`: no Slurm command
(the watch hub's squeue is :meth:`RestClient.squeue`) and no file access. The job directory
(logs, ``delete``'s marker, workspace copies) is reached only where this machine mounts the
cluster's shared filesystem (the ``mount`` setting, :class:`~.files.MountedFiles`); a
submission creates ``job_dir`` through it. Without one (or with ``job_dir`` outside it) the
directory must already exist on the cluster: Slurm fails a job whose directory is missing
at launch (``JobLaunchFailure``), and ``describe`` then says so.
Accounting (``sacct``'s records of ended jobs) comes from the ``slurmdb`` API when the daemon
offers it (:mod:`.rest_acct`).
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import os
import re
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from tether.schedulers.slurm.client import SlurmCommandError
from tether.schedulers.slurm.files import JobFiles, MountedFiles, NoFiles
from tether.schedulers.slurm.render import SlurmRequest
from tether.schedulers.slurm.rest_acct import from_slurmdb
from tether.schedulers.slurm.rest_job import job_description
from tether.schedulers.slurm.status import SlurmApp
from tether.schedulers.slurm.transport import (
    ConnectionDropped,
    SlurmTransportError,
    TransportCapabilities,
    TransportSettings,
)

if TYPE_CHECKING:
    from tether.schedulers.slurm.workspace import RemoteCopy

log: logging.Logger = logging.getLogger(__name__)

VERSIONS = ("v0.0.38", "v0.0.37", "v0.0.36")
"""API versions tether speaks, newest first (Slurm 21.08-22.05's job shape)."""
_AUTH_ERRORS = ("zero bytes were transmitted", "unspecified error", "authentication")
"""How slurmrestd 22.05 reports a request slurmctld refused for its token."""
_VERSION_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/job/submit$")
_DB_VERSION_PATH = re.compile(r"^/slurmdb/(v\d+\.\d+\.\d+)/jobs$")
ACCOUNTING_WINDOW = "now-7days"
"""How far back a listing reads accounting (as the ``local`` transport's ``sacct``)."""
_MINT_HINT = (
    "mint a new one on the cluster (scontrol token username=USER lifespan=SECONDS) and give "
    "it as SLURM_JWT, jwt_file or the connection's password"
)


class RestClient:
    """The cluster through slurmrestd (see the module docs).

    Args:
        settings: ``rest_url`` (required), ``user``, ``jwt_file``, ``tls_verify``,
            ``ca_file``, ``timeout``.
        jwt: The token from a connection's secret.
    """

    kind: ClassVar[str] = "rest"

    def __init__(self, settings: TransportSettings, jwt: str | None = None) -> None:
        self.settings = settings
        self._jwt = jwt
        self._version: str | None = None
        self._db_version: str | None = None
        outside = NoFiles("rest", self.where)
        mount = settings.mount_dirs()
        self.files: JobFiles = outside if mount is None else MountedFiles(*mount, outside)

    @property
    def capabilities(self) -> TransportCapabilities:
        """No command; files only through ``mount``; accounting where slurmrestd serves the
        ``slurmdb`` API (asked at the first accounting read)."""
        mounted = isinstance(self.files, MountedFiles)
        return TransportCapabilities(
            runs_commands=False, reads_files=mounted, copies_workspaces=mounted, accounting=True
        )

    @property
    def where(self) -> str:
        """The base URL."""
        return (self.settings.rest_url or "").rstrip("/")

    def _fail(self, problem: str, hint: str = "") -> SlurmTransportError:
        return SlurmTransportError("rest", self.where, problem, hint)

    # ---- credentials -------------------------------------------------------------------
    def token(self) -> str:
        """The JWT (read at each call, so a renewed file or variable is picked up)."""
        if self.settings.jwt_file:
            try:
                with open(self.settings.jwt_file) as f:
                    text = f.read().strip()
            except OSError as e:
                raise self._fail(f"cannot read jwt_file {self.settings.jwt_file!r}: "
                                 f"{e.strerror}", "check jwt_file") from None  # fmt: skip
            return text.partition("SLURM_JWT=")[2] or text
        token = self._jwt or os.environ.get("SLURM_JWT", "")
        if not token:
            raise self._fail("no JWT", "set SLURM_JWT, jwt_file or the connection's password; "
                             + _MINT_HINT)  # fmt: skip
        return token.strip()

    def login_user(self) -> str:
        """``user``, else the token's ``sun`` (Slurm user name) claim."""
        if self.settings.user:
            return self.settings.user
        claims = self._claims()
        if claims is None or not claims.get("sun"):
            raise self._fail("the JWT names no user (no 'sun' claim)", "give user=NAME")
        return str(claims["sun"])

    # ---- HTTP --------------------------------------------------------------------------
    def _context(self) -> ssl.SSLContext | None:
        if not self.where.startswith("https://"):
            return None
        if not self.settings.tls_verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return ctx
        return ssl.create_default_context(cafile=self.settings.ca_file)

    def _call(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        headers = {"Accept": "application/json"}
        if auth:
            headers["X-SLURM-USER-TOKEN"] = self.token()
            headers["X-SLURM-USER-NAME"] = self.login_user()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        # rest_url is checked to be http(s) (TransportSettings.check)
        url = self.where + path
        req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(  # noqa: S310
                req, timeout=self.settings.timeout, context=self._context()
            ) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            if e.code in (401, 403):
                raise self._fail(f"the JWT was refused (HTTP {e.code})", _MINT_HINT) from None
            if e.code == 404 and not raw.strip().startswith(b"{"):
                raise self._fail(f"{path} does not exist (HTTP 404)",
                                 "check rest_url (slurmrestd's base URL)") from None  # fmt: skip
            # Slurm's errors come as JSON with a 4xx/5xx status
        except urllib.error.URLError as e:
            raise self._url_error(e.reason, method) from None
        except (TimeoutError, http.client.HTTPException, ConnectionError) as e:
            raise self._url_error(e, method) from None
        try:
            doc = json.loads(raw or b"{}")
        except ValueError:
            raise self._fail(f"{path} answered something that is not JSON: {raw[:200]!r}",
                             "check rest_url: is it slurmrestd?") from None  # fmt: skip
        if auth and any(a in e.lower() for e in self._errors(doc) for a in _AUTH_ERRORS):
            raise self._token_problem()
        return doc

    def _claims(self) -> dict[str, Any] | None:
        """The token's claims (read, not verified: slurmctld verifies), or None."""
        try:
            payload = self.token().split(".")[1]
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (IndexError, ValueError):
            return None
        return claims if isinstance(claims, dict) else None

    def _token_problem(self) -> SlurmTransportError:
        """slurmrestd 22.05 answers a refused token with a generic error: say what the token
        itself shows (not a JWT, expired, another user) or what else it can be."""
        claims = self._claims()
        if claims is None:
            why = "the JWT was refused: it is not a JWT"
        elif isinstance(claims.get("exp"), (int, float)) and claims["exp"] < time.time():
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(claims["exp"]))
            why = f"the JWT was refused: it expired at {when}"
        elif self.settings.user and claims.get("sun") not in (None, self.settings.user):
            why = (f"the JWT was refused: it is for user {claims.get('sun')!r}, not "
                   f"{self.settings.user!r}")  # fmt: skip
        else:
            why = ("the JWT was refused or slurmctld did not answer slurmrestd: the token "
                   "may be signed with another key (or slurmctld is down)")  # fmt: skip
        return self._fail(why, _MINT_HINT)

    def _url_error(self, reason: object, method: str) -> SlurmTransportError:
        if isinstance(reason, ssl.SSLCertVerificationError):
            return self._fail(
                f"its TLS certificate is not trusted ({reason.verify_message})",
                "give ca_file=BUNDLE (tls_verify=False only for a test server)",
            )
        if isinstance(reason, ConnectionRefusedError):
            return self._fail(
                "nothing accepts connections there (is slurmrestd running?)",
                "check rest_url's host and port, and that slurmrestd runs",
            )
        if isinstance(reason, socket.gaierror):
            return self._fail(f"the host name does not resolve ({reason})", "check rest_url")
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return self._fail("no answer within the timeout", "check rest_url and the network")
        if method == "POST":  # the request may have reached slurmctld
            return ConnectionDropped("rest", self.where, f"the connection broke: {reason}",
                                     "check the network")  # fmt: skip
        return self._fail(f"the connection broke: {reason}", "check the network")

    @staticmethod
    def _errors(doc: Any) -> list[str]:
        errs = doc.get("errors") if isinstance(doc, dict) else None
        out = []
        for e in errs or []:
            if isinstance(e, dict) and (e.get("error_number") or e.get("error")):
                out.append(str(e.get("description") or e.get("error") or e))
                if e.get("error") and e.get("description") and e["error"] not in out[-1]:
                    out[-1] = f"{e['error']}: {e['description']}"
        return out

    # ---- version -----------------------------------------------------------------------
    @property
    def version(self) -> str:
        """The API version: the newest of :data:`VERSIONS` slurmrestd offers."""
        if self._version is None:
            doc = self._call("GET", "/openapi/v3", auth=True)
            paths = list(doc.get("paths") or {})
            offered = {m.group(1) for p in paths if (m := _VERSION_PATH.match(p))}
            usable = [v for v in VERSIONS if v in offered]
            if not usable:
                raise self._fail(
                    f"slurmrestd offers API {', '.join(sorted(offered)) or '(none)'}; tether "
                    f"speaks {', '.join(VERSIONS)}",
                    "load one of those (slurmrestd -s openapi/v0.0.38)",
                )
            db = {m.group(1) for p in paths if (m := _DB_VERSION_PATH.match(p))}
            self._db_version = next((v for v in VERSIONS if v in db), None)
            self._version = usable[0]
        return self._version

    @property
    def db_version(self) -> str | None:
        """The ``slurmdb`` (accounting) API version, or None when slurmrestd does not serve
        it (no ``openapi/dbv0.0.3x`` plugin loaded, or no slurmdbd)."""
        _ = self.version
        return self._db_version

    # ---- the scheduler's calls ---------------------------------------------------------
    def run(
        self, argv: Sequence[str], check: bool = True, retry: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Refused: slurmrestd runs no command (use :meth:`squeue`)."""
        raise self._fail(f"cannot run {argv[0] if argv else 'a command'}: slurmrestd runs no "
                         "Slurm command", "use squeue() or transport=ssh")  # fmt: skip

    def submit(self, req: SlurmRequest) -> tuple[str, str]:
        """Posts the job description (:func:`.rest_job.job_description`).

        Returns:
            (job id, '').

        Raises:
            SlurmCommandError: When Slurm refuses the job (with its reason).
        """
        body = job_description(req)
        if not self.files.make_dir(req.job_dir):
            log.info("job_dir %s is not under mount=%s: tether cannot create it over rest; the "
                     "job fails to start (JobLaunchFailure) unless it exists on the cluster",
                     req.job_dir, self.settings.mount)  # fmt: skip
        doc = self._call("POST", f"/slurm/{self.version}/job/submit", body)
        job_id = doc.get("job_id") if isinstance(doc, dict) else None
        errs = self._errors(doc)
        if errs or job_id is None:
            raise SlurmCommandError(["slurmrestd job/submit"], 1, "; ".join(errs) or str(doc))
        return str(job_id), ""

    def squeue(self, job_id: str | None = None, user: str | None = None) -> list[dict[str, Any]]:
        """Job records (the same shape as ``squeue --json``).

        Args:
            job_id: Only this job (and its het components).
            user: Only this user's jobs.

        Returns:
            The records (empty when Slurm no longer knows the job).
        """
        path = f"/slurm/{self.version}/" + (f"job/{job_id}" if job_id else "jobs")
        doc = self._call("GET", path)
        jobs: list[dict[str, Any]] = doc.get("jobs") or []
        errs = self._errors(doc)
        if errs and not jobs:
            if job_id is not None and any("invalid job id" in e.lower() for e in errs):
                return []
            raise SlurmCommandError([f"GET {path}"], 1, "; ".join(errs))
        if job_id is not None:
            jobs = [
                j for j in jobs
                if str(j.get("job_id")) == job_id or str(j.get("het_job_id")) == job_id
            ]  # fmt: skip
        if user is not None:
            jobs = [j for j in jobs if j.get("user_name") == user]
        return jobs

    def squeue_probe(
        self, job_id: str, directory: str, path: str
    ) -> tuple[list[dict[str, Any]], dict[str, int], bool]:
        """:meth:`squeue` of one job and the probe of its files (through ``mount``)."""
        return (self.squeue(job_id=job_id), *self.files.probe(directory, path))

    def workspace_copier(self) -> RemoteCopy:
        """Copies into the mounted shared filesystem (``mount``); refused without one.

        Returns:
            The copier.
        """
        if not isinstance(self.files, MountedFiles):
            raise self._fail("a dir workspace cannot be copied over slurmrestd",
                             "mount the cluster's shared filesystem here and give "
                             "mount=CLUSTER_DIR=LOCAL_DIR, put the code on the cluster (image "
                             "or shared path), or use transport=ssh, which copies it with "
                             "rsync")  # fmt: skip
        from tether.schedulers.slurm.workspace import mounted_copier

        return mounted_copier(self.files, self._fail)

    @property
    def cluster_key(self) -> str:
        """Names the cluster and the credentials that read it: the watch hub reads each
        cluster once per identity. Its view reads with the client of the follower that
        opened it, so a follower with other credentials (another user, a renewed or
        another connection's token) gets a view of its own instead of one whose token may
        have expired or been taken back."""
        try:
            who = f"{self.login_user()}:{zlib.crc32(self.token().encode()):08x}"
        except Exception:  # no token yet: the view's first read says what is missing
            who = "-"
        return f"rest:{self.where}:{who}"

    def squeue_jobs(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The records of several jobs from one ``GET .../jobs`` (the watch hub's read)."""
        wanted = set(ids)
        return [
            j for j in self.squeue()
            if str(j.get("job_id")) in wanted or str(j.get("het_job_id")) in wanted
        ]  # fmt: skip

    def accounting(self, job_id: str | None = None, user: str | None = None) -> list[SlurmApp]:
        """Ended jobs from the ``slurmdb`` API (empty when slurmrestd does not serve it).

        Args:
            job_id: Only this job, or several as ``ID,ID``.
            user: Only this user's jobs.

        Returns:
            tether's apps among the records.
        """
        db = self.db_version
        if db is None:
            return []
        ids = job_id.split(",") if job_id else []
        if len(ids) == 1:
            doc = self._call("GET", f"/slurmdb/{db}/job/{ids[0]}")
        else:  # 22.05 refuses its own users= filter: one time window, filtered here
            doc = self._call("GET", f"/slurmdb/{db}/jobs?start_time={ACCOUNTING_WINDOW}")
        jobs: list[dict[str, Any]] = [j for j in doc.get("jobs") or [] if isinstance(j, dict)]
        errs = [e for e in self._errors(doc) if "nothing found" not in e.lower()]
        if errs and not jobs:
            raise SlurmCommandError([f"GET /slurmdb/{db}/jobs"], 1, "; ".join(errs))
        if user is not None:
            jobs = [j for j in jobs if j.get("user") in (None, user)]
        apps = from_slurmdb(jobs)
        return [a for a in apps if a.app_id in ids] if ids else apps

    def scancel(self, job_id: str) -> None:
        """Cancels a job (``DELETE .../job/ID``); a job already gone is not an error."""
        doc = self._call("DELETE", f"/slurm/{self.version}/job/{job_id}")
        errs = [
            e for e in self._errors(doc)
            if "already completing or completed" not in e.lower()
            and "invalid job id" not in e.lower()
        ]  # fmt: skip
        if errs:
            raise SlurmCommandError([f"DELETE job/{job_id}"], 1, "; ".join(errs))

    def close(self) -> None:
        """Nothing to release (one HTTP connection per call)."""
