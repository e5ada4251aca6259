from services.simulator.main import main

main()
