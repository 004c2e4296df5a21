#!/bin/sh
# Runs INSIDE the test VM: powers off before the harness can report an exit code.
sync
poweroff -f
