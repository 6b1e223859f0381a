"""The EFA PyTorch training image as a CDK Docker image asset (built and pushed by ``cdk deploy``).

Synth only fingerprints the build context; ``cdk deploy`` builds and pushes the image to the bootstrap
ECR repository, and the nodes pull it with the node role (docs/design/training.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aws_cdk import CfnOutput
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

PLATFORMS = {"linux/amd64": ecr_assets.Platform.LINUX_AMD64, "linux/arm64": ecr_assets.Platform.LINUX_ARM64}

OUTPUT_ID = "TrainingImageUri"
"""Logical id of the stack output holding the image URI (stable: training jobs and scripts read it)."""


@dataclass(frozen=True)
class TrainingImageProps:
    directory: str
    """Docker build context (absolute path) with its Dockerfile."""
    platform: str = "linux/amd64"
    """``linux/amd64`` or ``linux/arm64``: the architecture of the nodes that run the image."""
    build_args: Mapping[str, str] = field(default_factory=dict)
    """``--build-arg`` values (the versions from the table of EFA software: efa_stack/planning/image_compat.py)."""


class EfaTrainingImage(Construct):
    """Builds ``props.directory`` at deploy time and outputs the pushed image's URI as ``TrainingImageUri``.

    ``image_uri`` is a deploy-time token (``<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<hash>``).
    """

    def __init__(self, scope: Construct, id: str, props: TrainingImageProps) -> None:
        super().__init__(scope, id)
        if props.platform not in PLATFORMS:
            raise ValueError(
                f"TrainingImageProps.platform {props.platform!r} is not supported; use one of {', '.join(PLATFORMS)}"
            )
        self.asset = ecr_assets.DockerImageAsset(
            self, "Asset", directory=props.directory, platform=PLATFORMS[props.platform],
            build_args=dict(props.build_args),
        )
        self.image_uri: str = self.asset.image_uri
        output = CfnOutput(
            self, "Uri", value=self.image_uri,
            description="EFA PyTorch training image (pushed to the CDK container-assets repository by cdk deploy)",
        )
        output.override_logical_id(OUTPUT_ID)
