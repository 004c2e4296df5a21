#!/bin/sh
# Runs INSIDE the test VM: never returns, so the harness must kill the VM at its timeout.
echo sleeping forever
sleep 1000
