"""The baseline for `make bench`: a CDK app with one empty stack."""

from aws_cdk import App, Stack

app = App()
Stack(app, "Empty")
app.synth()
