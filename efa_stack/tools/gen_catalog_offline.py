"""Regenerate the checked-in catalog offline, from moto's recorded copy of the EC2 API.

moto ships recent real ``DescribeInstanceTypes`` answers; serving them through ``mock_aws`` lets the
very same boto3 code path as ``efa-stack catalog refresh`` write the data files. Run with
``make catalog``.
"""

from __future__ import annotations

import os

import boto3
import moto
from moto import mock_aws

from efa_stack.tools.catalog_refresh import refresh


def main() -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "offline")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "offline")
    with mock_aws():
        summary = refresh(
            boto3.Session(region_name="us-east-1"),
            region="us-east-1",
            source=f"EC2 DescribeInstanceTypes as recorded in moto {moto.__version__}",
        )
    print(summary)


if __name__ == "__main__":
    main()
