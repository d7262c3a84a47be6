"""The management API as guest, for the stream case scripts."""

import base64
import json
import urllib.error
import urllib.request


def api(base, method, path, body=None, timeout=10.0):
    """(status, JSON or None) of a request to the management API at `base`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method, headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(),
        "Content-Type": "application/json",
    })
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, None
