from services.trainer.main import main

main()
