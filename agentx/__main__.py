from agentx.cli import main

main()
