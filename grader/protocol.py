"""What ol and its pytest plugin agree on: where the plugin finds its pipe and the run's nonce."""

FD_ENV = "OL_REPORT_FD"        # the number of the pipe's write end in the test process
NONCE_ENV = "OL_REPORT_NONCE"  # a random string every record must carry
