module github.com/corelog/corelog/tools/porcupine

go 1.21

require github.com/anishathalye/porcupine v1.3.1
