from services.predictor.main import main

main()
