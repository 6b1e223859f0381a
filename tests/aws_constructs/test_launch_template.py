"""aws_constructs/launch_template.py: the EFA launch template from its own props, in a plain CDK app."""

from __future__ import annotations

import pytest
from aws_cdk import App, Stack

from aws_constructs.launch_template import EfaLaunchTemplate, LaunchTemplateProps


def test_launch_template_sets_iops_and_throughput():
    stack = Stack(App(builtin_cloud_formation_validation=False), "Lt")
    lt = EfaLaunchTemplate(
        stack, "Lt", LaunchTemplateProps(instance_type="m7i.xlarge", volume_size_gib=100, volume_type="io2", volume_iops=5000),
        security_group_ids=["sg-1"],
    )
    ebs = stack.resolve(lt.launch_template.launch_template_data)["blockDeviceMappings"][0]["ebs"]
    assert (ebs["volumeType"], ebs["iops"]) == ("io2", 5000)
    with pytest.raises(ValueError, match="needs volume_iops"):
        EfaLaunchTemplate(
            stack, "Bad", LaunchTemplateProps(instance_type="m7i.xlarge", volume_size_gib=100, volume_type="io1"),
            security_group_ids=["sg-1"],
        )
