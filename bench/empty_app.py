"""The baseline for `make bench`: an empty CDK app (one empty stack) and an empty cdk8s chart, synthesized.

It pays what every CDK + cdk8s app pays (Python start, the jsii runtime, loading aws-cdk-lib and
cdk8s, writing a cloud assembly) and nothing else, so `python app.py` / this is the cost of efa-stack.
"""

import cdk8s
from aws_cdk import App, Stack

app = App()
Stack(app, "Empty")
k8s_app = cdk8s.App()
chart = cdk8s.Chart(k8s_app, "empty")
chart.to_json()
app.synth()
