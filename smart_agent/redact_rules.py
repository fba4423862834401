"""More redaction rules, as data: provider tokens (the forms detect-secrets and gitleaks ship),
secrets after key-like flags, variables and the password options of known tools, user names
in cluster paths, and host names that are not public."""

from __future__ import annotations

import re

_NB = r"(?<![A-Za-z0-9])"
_END = r"(?![A-Za-z0-9])"


def _mark(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def _value(kind: str = "secret"):  # type: ignore[no-untyped-def]
    """Keep the `key` and `sep` groups, replace what follows them."""

    def replace(match: re.Match[str]) -> str:
        return f"{match.group('key')}{match.group('sep')}{_mark(kind)}"

    return replace


# Self-identifying tokens: their prefix says what they are (gitleaks, detect-secrets).
PROVIDERS: tuple[tuple[str, str], ...] = (
    ("gitlab", r"gl(?:pat|dt|rt|ptt|cbt|imt|oas|soat|ffct|agent)-[A-Za-z0-9_-]{20,}"),
    ("google_oauth", r"ya29\.[0-9A-Za-z_-]{20,}"),
    ("google_oauth", r"1//0[0-9A-Za-z_-]{30,}"),
    ("replicate", r"r8_[A-Za-z0-9]{30,}"),
    ("pypi", r"pypi-[A-Za-z0-9_-]{50,}"),
    ("npm", r"npm_[A-Za-z0-9]{36}"),
    ("stripe", r"(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}"),
    ("stripe", r"whsec_[0-9A-Za-z]{24,}"),
    ("twilio", r"SK[0-9a-f]{32}"),
    ("twilio", r"AC[0-9a-f]{32}"),
    ("databricks", r"dapi[0-9a-f]{32}(?:-\d)?"),
    ("sendgrid", r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"),
    ("mailgun", r"key-[0-9a-f]{32}"),
    ("digitalocean", r"do[opr]_v1_[a-f0-9]{64}"),
    ("shopify", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    ("square", r"sq0(?:atp|csp)-[0-9A-Za-z_-]{22,}"),
    ("atlassian", r"ATATT3[A-Za-z0-9_=-]{30,}"),
    ("azure_ad", r"[a-zA-Z0-9_~.]{3}\dQ~[a-zA-Z0-9_~.-]{31,34}"),
    ("doppler", r"dp\.pt\.[a-zA-Z0-9]{43}"),
    ("grafana", r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),
    ("linear", r"lin_api_[a-zA-Z0-9]{40}"),
    ("newrelic", r"NRAK-[A-Z0-9]{27}"),
    ("telegram", r"\d{8,10}:AA[0-9A-Za-z_-]{33}"),
    ("discord", r"[MN][A-Za-z\d]{23,25}\.[\w-]{6}\.[\w-]{27,38}"),
    ("groq", r"gsk_[A-Za-z0-9]{48,}"),
    ("perplexity", r"pplx-[A-Za-z0-9]{40,}"),
    ("wandb", r"local-[0-9a-f]{40}"),
    ("heroku", r"HRKU-[A-Za-z0-9_-]{30,}"),
)

_SECRET_WORD = r"(?:key|token|secret|password|passwd|pass|pwd|pw|credentials?|apikey|auth)"
# After a one-token value: a token that ends in a separator was a key ('TOKEN "api_key": "s"'),
# so the token after it goes too, or the key word it held would be gone before the scan
# reached it.
THEN = r"(?:(?<=[:=])\s*[^\s;&|]+)*"

# Secrets after a name that says so: flags, variables, tools' password options, SAS URLs.
CONTEXT: tuple[tuple[str, str, object, tuple[str, ...]], ...] = (
    # --wandb_key KEY, --hub-token=T, --db-pass P (the word ends the flag: --monkey is not)
    (
        "secret",
        r"(?i)(?P<key>--(?:[A-Za-z0-9]+[_-]){0,4}" + _SECRET_WORD + r")(?P<sep>[= ]\s*)"
        r"(?!\[REDACTED:)(?!-)(?:(?!(?<![A-Za-z0-9_])--)\S)+"
        + THEN,  # a value stops where a flag begins
        _value(),
        ("--",),
    ),
    # KAGGLE_KEY=..., PGPASSWORD=..., export WANDB_API_KEY=..., set -x HF_TOKEN ...
    (
        "secret",
        r"(?P<key>\b[A-Z][A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|CREDENTIALS))"
        r"(?P<sep>\s*=\s*|\s+(?=\S))(?!\[REDACTED:)(?!-)[^\s;&|]+" + THEN,
        _value(),
        ("key", "token", "secret", "pass", "pwd", "credentials"),
    ),
    # wandb login KEY, huggingface-cli login --token KEY (the flag rule), docker login -p P
    (
        "secret",
        r"(?P<key>\b(?:wandb|huggingface-cli|hf|gh|npm|heroku)\s+(?:auth\s+)?login"
        r"(?:\s+--(?:relogin|host[= ]\S+|cloud|verify))*)(?P<sep>\s+)(?!--?\w)(?!\[REDACTED:)\S+"
        + THEN,
        _value(),
        ("login",),
    ),
    # sshpass -p PASS, mysql -pPASS / -p PASS, docker login -p PASS, smbclient -U u%PASS
    (
        "secret",
        r"(?P<key>\b(?:sshpass|mysql|mysqldump|mariadb|docker\s+login|podman\s+login)\b"
        r"[^|;&\n]*?\s-p)(?P<sep>\s*)(?!\[REDACTED:)[^\s;&|]+" + THEN,
        _value(),
        ("sshpass", "mysql", "mariadb", "login"),
    ),
    (
        "secret",
        r"(?P<key>\bsmbclient\b[^|;&\n]*?-U\s*\S+?%)(?P<sep>)[^\s;&|]+",
        _value(),
        ("smbclient",),
    ),
    # Azure storage connection strings and SAS tokens
    (
        "azure",
        r"(?P<key>AccountKey=)(?P<sep>)[A-Za-z0-9+/=]{20,}",
        _value("azure"),
        ("accountkey",),
    ),
    (
        "azure",
        r"(?P<key>SharedAccessKey=)(?P<sep>)[A-Za-z0-9+/=]{20,}",
        _value("azure"),
        ("sharedaccesskey",),
    ),
    ("azure", r"(?P<key>[?&]sig=)(?P<sep>)[A-Za-z0-9%+/=]{16,}", _value("azure"), ("sig=",)),
    # AWS pre-signed URLs and session tokens in query strings
    (
        "aws",
        r"(?P<key>X-Amz-(?:Signature|Security-Token|Credential)=)(?P<sep>)[^&\s]+",
        _value("aws"),
        ("x-amz-",),
    ),
    # key = "..." in config dumps, private_key_id and the like (the base rule needs a word)
    (
        "secret",
        r"(?P<key>\bpassword\s*:\s*)(?P<sep>)(?!\[REDACTED:)\S+" + THEN,
        _value(),
        ("password",),
    ),
)

# User names in home and cluster storage paths (the base rules cover /home/ and /Users/).
_PATH_ROOTS = (
    r"/(?:gpfs/scratch|scratch/gpfs|scratch/network|scratch|users|u|homes|storage/home"
    r"|global/homes/[a-z]|glade/(?:u/home|scratch|work)|lustre/(?:scratch|home)"
    r"|p/home/jusers|work/[a-z0-9_]+|project/[a-z0-9_]+|data/users|mnt/home|nfs/home)/"
)
PATHS: tuple[tuple[str, str, object, tuple[str, ...]], ...] = (
    (
        "home",
        r"(?P<base>" + _PATH_ROOTS + r")(?!\[)(?P<user>[^/\s'\"]+)(?=/|\s|$|['\"])",
        lambda m: f"{m.group('base')}[user]",
        (
            *("/scratch", "/users", "/u/", "/homes", "/storage", "/global", "/glade"),
            *("/lustre", "/p/home", "/work/", "/project/", "/data/users", "/mnt/home"),
            "/nfs/home",
        ),
    ),
)

# Public hosts stay: what a log says about them helps (downloads, hub, package indexes).
PUBLIC_DOMAINS = frozenset(
    {
        "github.com",
        "githubusercontent.com",
        "huggingface.co",
        "hf.co",
        "pypi.org",
        "pythonhosted.org",
        "pytorch.org",
        "python.org",
        "nvidia.com",
        "anaconda.org",
        "anaconda.com",
        "conda-forge.org",
        "wandb.ai",
        "google.com",
        "googleapis.com",
        "amazonaws.com",
        "openai.com",
        "anthropic.com",
        "docker.io",
        "docker.com",
        "nvcr.io",
        "ubuntu.com",
        "debian.org",
        "readthedocs.io",
        "example.com",
        "example.org",
        "example.edu",
    }
)
_TLD_LIST = (
    *("internal", "local", "localdomain", "lan", "corp", "intra", "intranet", "cluster", "hpc"),
    *("priv", "private", "edu", "gov", "com", "org", "net", "io", "ai", "co", "de", "uk", "fr"),
    *("ch", "jp", "cn", "ca", "au", "nl", "se", "it", "es", "us", "kr", "in", "fi", "no", "dk"),
    *("at", "be", "pl"),
)
_HOST_TLDS = "(?:" + "|".join(_TLD_LIST) + ")"
_FQDN = re.compile(
    r"(?<![\w.@/-])(?P<host>[a-z0-9](?:[a-z0-9-]{0,62})(?:\.[a-z0-9](?:[a-z0-9-]{0,62}))*"
    r"\." + _HOST_TLDS + r")(?![\w.-]*[\w-])(?![\w-])"
)


def _host(match: re.Match[str]) -> str:
    host = match.group("host")
    labels = host.split(".")
    if len(labels) < 3 and labels[-1] not in ("internal", "local", "lan", "corp", "cluster"):
        return host  # `site.com`, a public name; `node1.cluster.uni.edu` is internal
    for i in range(len(labels) - 1):
        if ".".join(labels[i:]) in PUBLIC_DOMAINS:
            return host
    return _mark("host")


def _node(match: re.Match[str]) -> str:
    return f"{match.group('key')}{_mark('host')}{match.group('tail')}"


HOSTS: tuple[tuple[str, str, object, tuple[str, ...]], ...] = (
    ("host", _FQDN.pattern, _host, tuple("." + t for t in _TLD_LIST)),
    # Cluster node names where Slurm, srun, pdsh and launchers print them.
    (
        "host",
        r"(?P<key>\bON |slurmstepd-|srun: error: |^stdout: |^stderr: |\bhost(?:name)?[=:]\s?"
        r"|\bon node |\bnodelist[=:]\s?)(?!\[REDACTED:)[A-Za-z][\w.-]*(?P<tail>:?)",
        _node,
        ("on ", "slurmstepd-", "srun: error", "stdout:", "stderr:", "host", "nodelist"),
    ),
    (
        "host",
        r"(?P<key>^)(?=[a-z][a-z0-9-]*\d: \[)[a-z][a-z0-9-]*\d(?P<tail>:)",
        _node,
        (": [",),
    ),
)


Rule = tuple[str, str, object, int, tuple[str, ...]]


def _prefix(pattern: str) -> tuple[str, ...]:
    """The literal start of a provider pattern, lower-cased: a line without it is skipped."""
    found = re.match(r"[A-Za-z0-9_-]+", pattern)
    head = found.group(0) if found else ""
    return (head.lower(),) if len(head) >= 2 else ()


def extra_rules() -> list[Rule]:
    """(kind, pattern, replacement, flags, hints) in the order they must run: provider
    tokens first, then named secrets (see redact.BUILTIN). `hints`: lower-case strings of
    which a text must hold one for the rule to be tried (most lines hold none)."""
    rules: list[Rule] = [
        (kind, _NB + pattern + _END, _mark(kind), 0, _prefix(pattern))
        for kind, pattern in PROVIDERS
    ]
    rules += [(kind, pattern, repl, 0, hints) for kind, pattern, repl, hints in CONTEXT]
    return rules


def late_rules() -> list[Rule]:
    """Paths and hosts, after every secret rule."""
    return [(k, p, r, re.M, hints) for k, p, r, hints in (*PATHS, *HOSTS)]
