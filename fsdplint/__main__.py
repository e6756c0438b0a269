from fsdplint.cli import main

main(prog_name="fsdplint")
