"""An object store's error as the OSError a local read would raise (data.remote._oserror), from the text
obstore gives (the request's URL, then the server's status)."""

from __future__ import annotations

import obstore.exceptions as ox
import pytest

from data.remote import _oserror

LINE = (
    "Generic S3 error: Error performing list request: Error performing GET "
    "http://127.0.0.1:{port}/{bucket}?list-type=2&prefix=runs%2F in 17.86ms - Server returned non-2xx "
    'status code: {status}: <?xml version="1.0" encoding="utf-8"?>\n<Error><Code>{code}</Code></Error>'
)


@pytest.mark.parametrize(
    ("port", "status", "code", "kind"),
    [
        (60493, "404 Not Found", "NoSuchBucket", FileNotFoundError),
        (40312, "404 Not Found", "NoSuchBucket", FileNotFoundError),  # a port holding "403"
        (54044, "403 Forbidden", "AccessDenied", PermissionError),  # a port holding "404"
        (40404, "403 Forbidden", "AccessDenied", PermissionError),
    ],
)
def test_remote_errors001_status_not_digits_of_the_url(port, status, code, kind):
    """The status the server returned decides missing against forbidden, whatever digits the URL's port
    holds (a test server's port such as 40312 made a missing bucket read as "permission denied")."""
    err = ox.GenericError(LINE.format(port=port, bucket="no-such-bucket", status=status, code=code))
    out = _oserror(err, "s3://no-such-bucket/runs")  # only its text is used
    assert type(out) is kind
    assert out.filename == "s3://no-such-bucket/runs"


def test_remote_errors002_other_status_is_an_input_output_error():
    """A status that is neither (a 500 from a port holding "403" and "404") is an I/O error with its text."""
    err = ox.GenericError(
        LINE.format(port=40340, bucket="b403404", status="500 Internal Server Error", code="X")
    )
    out = _oserror(err, "s3://b403404/runs")  # only its text is used
    assert type(out) is OSError and out.errno == 5 and "500 Internal Server Error" in out.strerror
