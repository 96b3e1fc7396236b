"""Every bench script once at tiny sizes. `make test-bench`."""
